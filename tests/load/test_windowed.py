"""A trace loaded one step at a time gives the whole trace's steps and step breakdown.

:mod:`kinetolens.windowed` decodes a trace to Parquet parts and builds each
step from the events of its window only, so that memory holds a step, not
the file.  Nothing may change for that: the steps (found from a few columns
of the parts) equal the whole model's, and every step's breakdown row built
from its window equals the whole trace's, on real traces chosen for what
can reach across a step's edge: GPU work running a step behind the host
(ns_resolution, resnet50), a step that opens waiting for the previous one's
kernels (H100 Qwen), collectives (nccl_parser_config), a DataLoader, a
backward thread, a CPU-only trace, AMD, and a generated trace of 14 steps.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.gputime.overview import step_breakdown, windowed_breakdown
from kinetolens.ingest import read_raw, spill

from kinetolens.windowed import open_windows
from tests.conftest import trace_path

WITH_STEPS = [
    "hta/df_index_resolver/df_index_resolver.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "hta/trace_diff/test/test.json.gz",
    "hta/call_stack/backward_thread.json",
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "param/dlrm_kineto/worker1_step_12.1694128201556.pt.trace.json.gz",
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
]


def _same_as_whole(path: Path, directory: Path) -> None:
    whole = kinetolens.load(path, cache=False, capture=False)
    windowed = open_windows(path, directory)
    # Op ids are positions in a model; the index's are no window's (each has its own).
    assert windowed.steps.drop("step_op_id").equals(whole.steps.drop("step_op_id"))
    steps = {r["step"]: r for r in whole.steps.to_dicts()}
    pairs = []
    for window, trace in windowed.traces():
        # The GPU work running in the step keeps its launch and op, the
        # previous step's too (launched before the step's host range began).
        s = steps[window.step]
        assert _kernels_in(trace, s["start"], s["end"]).equals(_kernels_in(whole, s["start"], s["end"])), window
        pairs.append((window.step, trace))
    by_window = windowed_breakdown(pairs)
    expected = step_breakdown(whole)
    assert by_window.height == whole.steps.height > 0
    assert by_window.equals(expected), f"{path.name}: the step breakdown built a window at a time differs"


def _kernels_in(trace: kinetolens.Trace, start: int, end: int) -> pl.DataFrame:
    cols = ["ts", "name", "launch_ts", "op", "module", "direction"]
    return trace.kernels.filter((pl.col("ts") < end) & (pl.col("ts") + pl.col("dur") > start)).select(cols).sort(cols, nulls_last=True)


@pytest.mark.parametrize("rel", WITH_STEPS, ids=[Path(r).parent.name for r in WITH_STEPS])
def test_each_step_from_its_window_equals_the_whole_trace(rel: str, tmp_path: Path) -> None:
    _same_as_whole(trace_path(rel), tmp_path / "spill")


def test_many_steps_in_many_parts_equal_the_whole_trace(many_steps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Parts of about 256 kB: the trace's tables span dozens of files, and each
    # window is read from several, in file order.
    monkeypatch.setattr(spill, "PART_BYTES", 1 << 18)
    _same_as_whole(many_steps, tmp_path / "spill")
    parts = open_windows(many_steps, tmp_path / "again").spill.parts["host"]
    assert len(parts) >= 10
    # A step's window opens the parts whose times meet it, not the whole file.
    middle = open_windows(many_steps, tmp_path / "third").windows()[7]
    assert 0 < sum(p.meets(middle.lo, middle.hi) for p in parts) <= len(parts) // 2


def test_a_window_holds_its_step_and_its_neighbours_edges_not_the_trace(many_steps: Path, tmp_path: Path) -> None:
    windowed = open_windows(many_steps, tmp_path / "spill")
    whole = kinetolens.load(many_steps, cache=False)
    assert windowed.steps.height == 14
    for window, trace in windowed.traces():
        # The step, the previous one back to its launches of GPU work still
        # running, and what the next one started before this one's end.
        assert trace.ops.height < 3 * whole.ops.height / windowed.steps.height, window
        assert window.step in trace.steps["step"].to_list()


def test_the_parts_hold_every_event_the_whole_reader_does(tmp_path: Path) -> None:
    path = trace_path("hta/trace_diff/test/test.json.gz")
    raw = read_raw(path)
    parts = spill.spill_kineto(path, tmp_path / "spill")
    for table in ("host", "device", "memory", "flows"):
        got = parts.scan(table).collect()
        got = got.drop("end") if "end" in got.columns else got
        assert got.equals(getattr(raw, table)), table
        assert parts.rows[table] == got.height
    assert parts.held["threads"].equals(raw.threads)
    assert parts.metadata.keys() == raw.metadata.keys()


def test_far_off_events_are_in_no_window_and_counted_once(tmp_path: Path) -> None:
    source = trace_path("hta/trace_diff/test/test.json.gz")
    doc = json.loads(gzip.decompress(source.read_bytes()))
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["ts"] = 1.0  # decades before the rest of the trace
    path = tmp_path / "far.json"
    path.write_text(json.dumps(doc))
    parts = spill.spill_kineto(path, tmp_path / "spill")
    whole = kinetolens.load(path, cache=False)
    far = [w for w in parts.warnings if "more than a day" in w.detail]
    assert [(w.kind, w.count) for w in far] == [("events skipped", 1)]
    assert far == [w for w in whole.warnings if "more than a day" in w.detail]
    assert parts.scan("device").filter(pl.col("ts") < 10**9).collect().height == 0
    _same_as_whole(path, tmp_path / "spill2")


def test_a_trace_with_no_usable_event_is_one_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}]}))
    with pytest.raises(kinetolens.TraceError, match="empty.json.*no usable events"):
        spill.spill_kineto(path, tmp_path / "spill")
