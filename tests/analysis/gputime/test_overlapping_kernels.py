"""Kernels that overlap on one stream (Blackwell's programmatic dependent
launch starts the next kernel before the previous one ends) leave no idle
gap between them: idle is measured from the latest end so far on the
stream, and an overlap is never a negative gap."""

from __future__ import annotations

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.gputime.gpu_streams import stream_work
from kinetolens.analysis.gputime.idle import idle_breakdown, idle_gap_stats, idle_gaps
from tests.conftest import trace_path

B300 = [
    "tracelens/b300/moe_05_large_capacity/moe_05_large_capacity.json.gz",
    "tracelens/b300/qwen3_30b_a3b_decode/1782799835.6885648-TP-0-DECODE.trace.json.gz",
]


@pytest.mark.parametrize("rel", B300)
def test_overlapping_kernels_leave_no_negative_idle(rel: str) -> None:
    trace = kinetolens.load(trace_path(rel), cache=False)
    work = stream_work(trace).sort("stream", "ts")
    overlapping = work.filter(pl.col("ts") < pl.col("end").shift(1).over("stream"))
    assert overlapping.height > 0, "the trace should have kernels overlapping on a stream"
    assert int(idle_gaps(trace)["gap_ns"].min()) >= 0  # type: ignore[arg-type]
    stats = idle_gap_stats(trace).drop_nulls("min")
    assert (stats["min"] >= 0).all(), stats.filter(pl.col("min") < 0)
    assert (idle_breakdown(trace)["idle_us"] >= 0).all()


def test_idle_is_the_stream_time_nothing_covers() -> None:
    """On each stream, the gaps sum to the span minus the union of its work."""
    trace = kinetolens.load(trace_path(B300[1]), cache=False)
    work = stream_work(trace)
    gaps = idle_gaps(trace).group_by("stream").agg(pl.col("gap_ns").sum())
    for stream, gap in gaps.iter_rows():
        w = work.filter(pl.col("stream") == stream).sort("ts")
        covered, end = 0, None
        for ts, e in w.select("ts", "end").iter_rows():
            if end is None or ts > end:
                covered += e - ts
                end = e
            elif e > end:
                covered += e - end
                end = e
        span = int(w["end"].max()) - int(w["ts"].min())  # type: ignore[arg-type]
        assert gap == span - covered, stream


def test_overlapping_kernels_share_their_time_on_the_critical_path() -> None:
    """The path counted both of two overlapping kernels in full: 8,666 us of
    path in an 8,527 us span, 6,172 us of GPU compute where 5,380 us ran."""
    from kinetolens.analysis.gputime.gpu_streams import covered_ns, union_intervals
    from kinetolens.analysis.paths.critical_path import critical_paths, step_windows

    trace = kinetolens.load(trace_path(B300[1]), cache=False)
    (path,) = critical_paths(trace, step_windows(trace))
    assert path.length_us <= path.span_us
    compute = stream_work(trace).filter(pl.col("kernel_type") == "COMPUTATION")
    on_path = float(path.path.filter(pl.col("bound_by") == "gpu_compute")["us"].sum())
    assert 0 < on_path <= covered_ns(union_intervals(compute)) / 1000
