"""The critical path's clock note: a queued stream is not a clock offset.

A step whose stream stays queued has every kernel start long after its
launch, exactly as a GPU clock offset from the host's would show; only the
whole trace, with the moments its queue drained, tells the two apart."""

from __future__ import annotations

import polars as pl

from kinetolens import load
from kinetolens.analysis.paths.critical_path import critical_paths, step_windows
from kinetolens.model.clocks import gpu_clock_offset
from tests.conftest import trace_path

QUEUED = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
#: A vLLM graph replay whose GPU times are 146.4 ms behind the host's (tests/analysis/advice/test_clock_offset_advice.py).
OFFSET = "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"


def test_a_queued_stream_is_no_clock_offset() -> None:
    trace = load(trace_path(QUEUED))
    windows = step_windows(trace)
    # Steps 102-105 alone look offset: their kernels run back to back, 63-91 ms behind
    # their launches; step 101's first kernels started within microseconds of theirs.
    alone = [gpu_clock_offset(trace, (w.start, w.end)) for w in windows]
    assert alone[0] is None and all(o is not None and 63e6 < o.offset_ns < 65e6 for o in alone[1:])
    k = trace.kernels.filter(pl.col("launch_ts").is_between(windows[2].start, windows[2].end, closed="left")).sort("ts")
    assert int((k["ts"] - (k["ts"] + k["dur"]).shift(1)).drop_nulls().max()) < 100_000  # no idle gap of 0.1 ms
    # The critical path says nothing about the clocks: the trace's clocks agree.
    assert gpu_clock_offset(trace) is None
    assert [n for cp in critical_paths(trace, windows) for n in cp.notes if "clock" in n] == []


def test_an_offset_trace_gives_one_clock_note_for_all_its_steps() -> None:
    trace = load(trace_path(OFFSET))
    paths = critical_paths(trace, step_windows(trace))
    notes = {n for cp in paths for n in cp.notes if "clock" in n}
    assert len(notes) == 1 and "at least 146.4 ms after its launch" in notes.pop()
