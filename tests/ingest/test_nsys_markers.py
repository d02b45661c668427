"""nsys exports with ``kinetolens.nvtx`` markers: ops, shapes, dtypes, modules, sites.

nsys needs a GPU, so no export with the markers can be recorded here.  The
marker texts below are real: a small model runs on the CPU under
``kinetolens.nvtx(keep_markers=True)``, which builds exactly the strings it
would push to NVTX.  Their placement in time is ours, laid out as nsys
nests them on the launching thread: the ``kinetolens.module`` range around
the module's ops, torch's ``emit_nvtx`` range of each op (opened by the
dispatcher before autograd) around the marker of the same call, and the ops
that call's implementation runs inside it.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

torch = pytest.importorskip("torch")

import kinetolens
from kinetolens.capture.nvtx import MODULE_PREFIX, parse_marker
from kinetolens.ingest.nsys_host import nvtx_host_rows

NSYS = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "nsys"
SAXPY = NSYS / "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
HERE = str(Path(__file__).resolve())
PID, TID = 4242, 4243


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x: Any) -> Any:
        h = self.act(self.fc1(x))  # FC1
        return self.fc2(h)  # FC2


def line_of(tag: str) -> int:
    with open(__file__, encoding="utf-8") as fh:
        return next(i for i, line in enumerate(fh, 1) if line.rstrip().endswith(f"# {tag}"))


def real_markers() -> list[str]:
    """The op markers of one forward and backward pass, from real torch."""
    torch.manual_seed(0)
    net = Net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no NVTX in a CPU build
        with kinetolens.nvtx(keep_markers=True) as marks:
            net(torch.randn(3, 4)).sum().backward()
    return marks.markers


def emit_nvtx_text(op: str, seq: int, shapes: list[Any]) -> str:
    """torch's emit_nvtx(record_shapes=True) range message for one op."""
    sizes = json.dumps([s if isinstance(s, list) else [] for s in shapes])
    return f"{op}, seq = {seq}, op_id = {seq + 100}, sizes = {sizes}"


def layout(markers: list[str], *, with_emit: bool = True) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
    """NVTX ranges as ``read_nvtx`` returns them, nested as nsys records them.

    Each op gets 100 ns: its emit_nvtx range [t, t+100), its marker
    [t+10, t+90) and, inside an ``aten::t`` marker, the ``aten::transpose``
    emit_nvtx range its implementation records.  Consecutive ops of one
    module share that module's range (and its parents').  Returns the frame
    and, per op, what the reader should make of it.
    """
    rows: list[tuple[int, int, str]] = []
    expected: list[dict[str, Any]] = []
    open_modules: list[tuple[str, int]] = []
    t = 1_000

    def close_to(depth: int) -> None:
        while len(open_modules) > depth:
            path, start = open_modules.pop()
            rows.append((start, t, MODULE_PREFIX + path))

    for seq, text in enumerate(markers):
        m = parse_marker(text)
        assert m is not None
        path = m["module"] or ""
        parts = path.split(".") if path else []
        prefixes = [".".join(parts[: i + 1]) for i in range(len(parts))]
        keep = 0
        while keep < min(len(open_modules), len(prefixes)) and open_modules[keep][0] == prefixes[keep]:
            keep += 1
        close_to(keep)
        for prefix in prefixes[keep:]:
            open_modules.append((prefix, t))
            t += 5
        if with_emit:
            rows.append((t, t + 100, emit_nvtx_text(m["op"], seq, m["shapes"])))
        rows.append((t + 10, t + 90, text))
        if m["op"] == "aten::t" and with_emit:
            rows.append((t + 20, t + 60, emit_nvtx_text("aten::transpose", seq, [m["shapes"][0], None, None])))
        expected.append({**m, "seq": seq if with_emit else None, "ts": t if with_emit else t + 10})
        t += 105
    close_to(0)
    frame = pl.DataFrame(
        {
            "proc": [PID] * len(rows),
            "pid": [PID] * len(rows),
            "tid": [TID] * len(rows),
            "ts": [r[0] for r in rows],
            "end": [r[1] for r in rows],
            "domain": [0] * len(rows),
            "name": [r[2] for r in rows],
            "domain_name": [None] * len(rows),
        },
        schema_overrides={"domain_name": pl.String},
    )
    return frame.sample(fraction=1.0, shuffle=True, seed=7), expected  # nsys rows come in no set order


@pytest.fixture(scope="module")
def markers() -> list[str]:
    found = real_markers()
    assert len(found) > 20
    return found


def test_markers_become_ops_with_shapes_dtypes_modules_and_sites(markers: list[str]) -> None:
    frame, expected = layout(markers)
    rows = nvtx_host_rows(frame)
    ops = rows.filter(pl.col("kind") == "op").sort("ts")
    # One op per call (the marker merged into its emit_nvtx range), plus the
    # aten::transpose each aten::t runs.
    n_t = sum(1 for e in expected if e["op"] == "aten::t")
    assert ops.height == len(expected) + n_t
    assert not ops["name"].str.starts_with("kinetolens").any()
    calls = ops.filter(pl.col("name") != "aten::transpose")
    assert calls["name"].to_list() == [e["op"] for e in expected]
    assert calls["sequence_number"].to_list() == [e["seq"] for e in expected]
    # The op keeps the emit_nvtx interval: the whole call.
    assert calls["ts"].to_list() == [e["ts"] for e in expected]
    assert calls["dur"].unique().to_list() == [100]
    assert calls["module"].to_list() == [e["module"] for e in expected]
    assert calls["source"].to_list() == [e["site"] for e in expected]

    addmm = calls.filter(pl.col("name") == "aten::addmm").to_dicts()
    assert [a["module"] for a in addmm] == ["Net.fc1", "Net.fc2"]
    assert [a["source"] for a in addmm] == [f"{HERE}:{line_of('FC1')}", f"{HERE}:{line_of('FC2')}"]
    # Kineto's Input Dims / Input type text, read by the same parser.
    assert json.loads(addmm[0]["input_dims"]) == [[8], [3, 4], [4, 8]]
    assert json.loads(addmm[0]["input_types"]) == ["float32", "float32", "float32"]
    # Non-tensor arguments keep their position, empty as in Kineto.
    summed = calls.filter(pl.col("name") == "aten::sum").to_dicts()[-1]
    assert json.loads(summed["input_dims"]) == [[3, 8], [], []]
    assert json.loads(summed["input_types"]) == ["float32", "", ""]
    # Backward ops ran outside every module: none here (the model takes it
    # from their forward op).
    tb = calls.filter(pl.col("name") == "aten::threshold_backward")
    assert tb["module"].to_list() == [None]

    # Ops without a marker of their own inherit from the call around them.
    transpose = ops.filter(pl.col("name") == "aten::transpose").to_dicts()
    assert transpose[0]["module"] == "Net.fc1" and transpose[0]["source"] == f"{HERE}:{line_of('FC1')}"

    modules = rows.filter(pl.col("kind") == "annotation")
    assert Counter(modules["name"].to_list()) == {
        "nn.Module: Net": 1,
        "nn.Module: Net.fc1": 1,
        "nn.Module: Net.act": 1,
        "nn.Module: Net.fc2": 1,
    }
    assert dict(zip(modules["name"], modules["module"])) == {
        f"nn.Module: {p}": p for p in ("Net", "Net.fc1", "Net.act", "Net.fc2")
    }


def test_markers_without_emit_nvtx_stand_alone(markers: list[str]) -> None:
    frame, expected = layout(markers, with_emit=False)
    ops = nvtx_host_rows(frame).filter(pl.col("kind") == "op").sort("ts")
    assert ops["name"].to_list() == [e["op"] for e in expected]
    assert ops["sequence_number"].null_count() == ops.height
    assert ops["dur"].unique().to_list() == [80]
    assert ops["module"].to_list() == [e["module"] for e in expected]


def test_emit_nvtx_of_another_op_is_not_merged(markers: list[str]) -> None:
    """aten::linear's emit range encloses the aten::addmm marker: two ops."""
    addmm = next(m for m in markers if '"aten::addmm"' in m)
    frame = pl.DataFrame(
        {
            "proc": [PID] * 3, "pid": [PID] * 3, "tid": [TID] * 3,
            "ts": [0, 10, 20], "end": [100, 90, 80], "domain": [0] * 3,
            "name": ["aten::linear, seq = 3, op_id = 9, sizes = [[3, 4], [8, 4], [8]]",
                     "aten::addmm, seq = 4, op_id = 10, sizes = [[8], [3, 4], [4, 8]]", addmm],
            "domain_name": [None] * 3,
        },
        schema_overrides={"domain_name": pl.String},
    )
    ops = nvtx_host_rows(frame).sort("ts")
    assert ops["name"].to_list() == ["aten::linear", "aten::addmm"]
    assert ops["sequence_number"].to_list() == [3, 4]
    assert ops["ts"].to_list() == [0, 10]
    # aten::linear has no marker and nothing around it: no module.
    assert ops["module"].to_list() == [None, "Net.fc1"]


def test_a_broken_marker_stays_a_named_range() -> None:
    frame = pl.DataFrame(
        {"proc": [1], "pid": [1], "tid": [1], "ts": [0], "end": [5], "domain": [0],
         "name": ['kinetolens {"op": truncated'], "domain_name": [None]},
        schema_overrides={"domain_name": pl.String},
    )
    ops = nvtx_host_rows(frame)
    assert ops["name"].to_list() == ['kinetolens {"op": truncated']
    assert ops["input_dims"].to_list() == [None]


# --------------------------------------------------------------------------- end to end on a real export


def test_kernels_of_a_real_export_get_op_module_shapes_and_source(markers: list[str], tmp_path: Path) -> None:
    """The real saxpy export (nsys 2022.2, 5 'saxpy' NVTX ranges, each around
    one kernel launch) with those ranges' text replaced by real markers, an
    emit_nvtx range of the same op and a module range put around each.  The
    markers come from the CPU run above; their placement is ours because
    nsys needs a GPU."""
    path = tmp_path / SAXPY.name
    shutil.copyfile(SAXPY, path)
    compute = [m for m in markers if '"op":"aten::addmm"' in m or '"op":"aten::relu"' in m][:3]
    forward = (compute * 2)[:5]  # fc1, act, fc2, fc1, act
    parsed = [parse_marker(m) for m in forward]
    conn = sqlite3.connect(path)
    try:
        ranges = conn.execute(
            "SELECT rowid, start, \"end\", globalTid FROM NVTX_EVENTS WHERE text = 'saxpy' ORDER BY start"
        ).fetchall()
        assert len(ranges) == 5
        for (rowid, start, end, tid), text, m in zip(ranges, forward, parsed):
            assert m is not None
            conn.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?", (text, rowid))
            for lo, hi, outer in (
                (start - 50, end + 50, emit_nvtx_text(m["op"], 7, m["shapes"])),
                (start - 100, end + 100, MODULE_PREFIX + m["module"]),
            ):
                conn.execute(
                    "INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, globalTid, domainId) "
                    "VALUES (?, ?, 59, ?, ?, 0)",
                    (lo, hi, outer, tid),
                )
        conn.commit()
    finally:
        conn.close()

    env = dict(os.environ, COLUMNS="200", POLARS_MAX_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "kernels", "--no-cache", "--json",
         "-c", "op,module,params,source,kernel", str(path)],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in json.loads(proc.stdout) if r["kernel"].startswith("saxpy")]
    assert [r["op"] for r in rows] == [m["op"] for m in parsed]  # type: ignore[index]
    assert [r["module"] for r in rows] == [m["module"] for m in parsed]  # type: ignore[index]
    assert [r["source"] for r in rows] == [m["site"] for m in parsed]  # type: ignore[index]
    assert [r["module"] for r in rows] == ["Net.fc1", "Net.act", "Net.fc2", "Net.fc1", "Net.act"]
    assert rows[0]["op"] == "aten::addmm"
    assert rows[0]["params"] == "[[8], [3, 4], [4, 8]] float32, float32, float32"
    assert rows[2]["params"] == "[[2], [3, 8], [8, 2]] float32, float32, float32"
    assert rows[0]["source"] == f"{HERE}:{line_of('FC1')}"
    assert rows[2]["source"] == f"{HERE}:{line_of('FC2')}"

    t = kinetolens.load(path, cache=False)
    # One op per call: the marker merged into its emit_nvtx range.
    aten = t.ops.filter(pl.col("name").str.starts_with("aten::"))
    assert Counter(aten["name"]) == Counter(m["op"] for m in parsed)  # type: ignore[index]
    assert t.ops.filter(pl.col("name").str.starts_with("kinetolens")).height == 0
    assert t.ops.filter(pl.col("name") == "aten::addmm")["sequence_number"].to_list() == [7, 7, 7]
    # Module ranges are annotations around the ops, as in Kineto traces.
    fc1 = t.ops.filter(pl.col("name") == "nn.Module: Net.fc1")
    assert fc1.height == 2 and set(fc1["kind"].cast(pl.String)) == {"annotation"}
    inner = t.ops.filter(pl.col("parent_id").is_in(fc1["op_id"].implode()))
    assert inner["name"].to_list() == ["aten::addmm", "aten::addmm"]
