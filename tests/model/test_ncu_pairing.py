"""Nsight Compute's counters paired with the trace's kernels: the recorded
H200 step (``tests/data/gpu/ncu_step.*``: the trace from one run, ncu's CSV
from a second run of the same step)."""

from __future__ import annotations

import csv
import json
import gzip
import io
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.hardware.counters import counter_table, op_measured
from kinetolens.analysis.hardware.tensor_cores import counter_verdicts
from kinetolens.ingest.ncu_csv import read_ncu_csv
from kinetolens.model.ncu_pairing import NCU_KEY, launch_ordered_kernels
from kinetolens.registry.kernel_names import kernel_function

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu"
TRACE = DATA / "ncu_step.pt.trace.json.gz"
NCU_CSV = DATA / "ncu_step.ncu.csv.gz"


def _paired(ncu: Path = NCU_CSV) -> tuple[kinetolens.Trace, dict[int, int]]:
    """The trace with ``ncu`` paired in, and ncu kernel -> launch id."""
    trace = kinetolens.load(TRACE, cache=False, ncu=ncu)
    links = trace.kernel_counters.group_by("range_id").agg(pl.col("launch_id").first())
    return trace, dict(links.iter_rows())


def _csv_without(tmp_path: Path, drop: set[int], extra_after: int | None = None) -> Path:
    rows = list(csv.reader(io.StringIO(gzip.decompress(NCU_CSV.read_bytes()).decode())))
    kept = [r for i, r in enumerate(rows) if i < 2 or (i - 2) not in drop]
    if extra_after is not None:  # a kernel the trace never ran, in the middle
        foreign = list(rows[2 + extra_after])
        foreign[rows[0].index("Kernel Name")] = "void some_other_library::kernel<int>(int)"
        kept.insert(2 + extra_after + 1, foreign)
        for n, row in enumerate(kept[2:]):  # ncu numbers its kernels in launch order
            row[rows[0].index("ID")] = str(n)
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(kept)
    path = tmp_path / "ncu.csv"
    path.write_text(out.getvalue())
    return path


def test_every_profiled_kernel_pairs_with_the_trace_kernel_of_its_name_grid_and_block() -> None:
    trace, links = _paired()
    ncu = read_ncu_csv(NCU_CSV).frame
    kernels = launch_ordered_kernels(trace)
    assert len(links) == ncu.height == kernels.height == 90 and not trace.warnings
    assert sorted(links.values()) == sorted(kernels["launch_id"].to_list())  # one kernel each
    by_launch = {row["launch_id"]: row for row in kernels.iter_rows(named=True)}
    spelled_apart = 0
    for j, launch in links.items():
        ours, theirs = by_launch[launch], ncu.row(j, named=True)
        # CUPTI and ncu spell most names differently; the function, grid and block agree
        spelled_apart += ours["name"] != theirs["kernel"]
        assert kernel_function(ours["name"]) == kernel_function(theirs["kernel"])
        assert [ours[f"{d}_{a}"] for d in ("grid", "block") for a in "xyz"] == [
            theirs[f"{d}_{a}"] for d in ("grid", "block") for a in "xyz"
        ]
    assert spelled_apart > 60  # so pairing by the names as written would fail
    # in launch order: ncu's IDs follow the launches
    order = {launch: i for i, launch in enumerate(kernels["launch_id"].to_list())}
    assert [order[links[j]] for j in sorted(links)] == list(range(90))
    assert trace.metadata[NCU_KEY] == str(NCU_CSV)


def test_a_partial_profile_pairs_the_same_kernels(tmp_path: Path) -> None:
    # ncu --launch-skip 10 and a -k filter (no vectorized elementwise kernels) leave
    # gaps: the kernels it did profile pair as before
    _, whole = _paired()
    names = read_ncu_csv(NCU_CSV).frame["kernel"].to_list()
    filtered = {j for j, n in enumerate(names) if kernel_function(n) == "vectorized_elementwise_kernel"}
    assert 10 < len(filtered) < 40
    drop = set(range(10)) | filtered
    trace, part = _paired(_csv_without(tmp_path, drop))
    kept = [j for j in range(90) if j not in drop]
    assert len(part) == len(kept) and not trace.warnings
    assert [part[i] for i in range(len(kept))] == [whole[j] for j in kept]


def test_a_kernel_the_trace_never_ran_is_counted_not_guessed(tmp_path: Path) -> None:
    _, whole = _paired()
    trace, got = _paired(_csv_without(tmp_path, set(), extra_after=44))
    (warning,) = trace.warnings
    assert warning.kind == "Nsight Compute kernels not in the trace" and warning.count == 1
    # the foreign row is ncu's 46th; every other kernel keeps its launch
    assert [got[j] for j in sorted(got)] == [whole[j] for j in range(90)]
    assert 45 not in got
    res = _cli("counters", str(TRACE), "--ncu", str(tmp_path / "ncu.csv"), "--no-cache", "-w", "100")
    said = [line for line in res.stderr.splitlines() if line.startswith("kinetolens: warning: Nsight Compute kernels not in the trace")]
    assert res.returncode == 0 and len(said) == 1 and "(1x)" in said[0], res.stderr


def test_tensor_core_math_decides_the_verdict_and_the_measured_flops() -> None:
    trace, _ = _paired()
    table = counter_table(trace)
    assert set(table["pairing"]) == {"kernel name, grid and block"}
    # the tensor pipe also issues plain half-precision FMAs (HFMA2.MMA): an
    # elementwise add shows tensor-pipe instructions and no matrix math
    hfma2 = table.filter((pl.col("sm__inst_executed_pipe_tensor.sum") > 0) & (pl.col("tensor_flops") == 0))
    assert hfma2.height >= 1 and set(hfma2["tc"]) == {"no"}, hfma2.select("kernel", "tc")
    gemm = table.filter(pl.col("bottom_level_op") == "aten::mm")
    assert gemm.height == 10 and set(gemm["tc"]) == {"yes"} and set(gemm["tc_source"]) == {"counters"}
    verdicts = dict(counter_verdicts(trace).iter_rows())
    assert all(verdicts[k] == "no" for k in hfma2["kernel"])
    # measured work of a GEMM op: its Tensor Core FLOPs, where the range profiler could give none
    mm = op_measured(trace).filter(pl.col("name") == "aten::mm")
    assert mm.height == 10 and (mm["measured_flops"] >= mm["flops"]).all()
    assert (mm["flops_ratio"] == 1.0).sum() >= 8


def test_the_counters_command_pairs_and_fits_80_columns(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "counters", str(TRACE), "--ncu", str(NCU_CSV), "--no-cache", "-w", "80"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    text = " ".join(res.stdout.split())
    assert "90 of the trace's 90 kernels profiled by Nsight Compute" in text
    assert "Tensor Core FLOPs 436 MFLOP" in text
    assert "tensor" in res.stdout and "25.2 MFLOP" in res.stdout  # the first GEMM's 2MNK in its row


@pytest.mark.parametrize("command", ["counters", "roofline"])
def test_the_counter_commands_offer_ncu(command: str) -> None:
    res = subprocess.run([sys.executable, "-m", "kinetolens.cli.main", command, "--help"],
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0 and "--ncu" in res.stdout


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kinetolens.cli.main", *args],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_by_op_puts_modeled_beside_measured_work() -> None:
    # the GEMMs' measured math is their modeled 2MNK (plus tile padding), and the
    # whole table fits 80 columns with its ratios on their own scale each
    res = _cli("counters", str(TRACE), "--ncu", str(NCU_CSV), "--by-op", "--json", "--no-cache")
    assert res.returncode == 0, res.stderr
    rows = {r["op"]: r for r in json.loads(res.stdout)}
    mm = rows["aten::mm"]
    assert mm["calls"] == 10 and 1.0 <= mm["flops_ratio"] <= 1.05
    assert mm["excess_bytes"] == pytest.approx(mm["measured_bytes"] - mm["bytes"])
    table = _cli("counters", str(TRACE), "--ncu", str(NCU_CSV), "--by-op", "--no-cache", "-w", "80")
    lines = table.stdout.splitlines()
    assert table.returncode == 0 and max(map(len, lines)) <= 80
    fill = next(line for line in lines if line.startswith("aten::fill_"))
    sum_row = next(line for line in lines if line.startswith("aten::sum"))
    # 4 modeled bytes against a 4 kB DRAM transaction: 1,024x, and the others keep their decimals
    assert fill.split()[-1] == "1,024" and sum_row.split()[-1] == "1.45", (fill, sum_row)


def test_by_op_on_counters_without_modeled_ops_says_so() -> None:
    from tests.conftest import trace_path

    res = _cli("counters", str(trace_path("hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz")),
               "--by-op", "--no-cache", "-w", "100")  # fmt: skip
    assert res.returncode == 0 and "no profiled kernel belongs to an op with modeled work" in res.stdout, res.stdout


@pytest.mark.parametrize("width", [60, 80, 120])
def test_roofline_with_measured_bytes_fits_the_terminal(width: int) -> None:
    # the measured column joins the table without pushing it past the width
    res = _cli("roofline", str(TRACE), "--ncu", str(NCU_CSV), "--no-cache", "-w", str(width))
    lines = res.stdout.splitlines()
    assert res.returncode == 0 and max(map(len, lines)) <= width, res.stdout
    mm = next(line for line in lines if "│ aten::mm " in line)
    assert mm.count("│") >= 6  # the row is whole: key, numbers, closing border
    if width >= 80:
        assert any(line.rstrip(" ┃").endswith("ratio") for line in lines if line.startswith("┃"))
