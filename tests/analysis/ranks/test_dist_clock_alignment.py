"""Ranks on different clocks: a real 2-process gloo run whose rank 1 trace is
rewritten with every timestamp 1.5 s later (as if its host's clock ran ahead).
The offset estimated from matched collective ends must recover the shift, and
every figure of ``dist`` must read the same as on the unshifted run."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from kinetolens.analysis.ranks.clocks import aligned_calls, clock_offsets
from kinetolens.analysis.ranks.dist_report import dist_report
from kinetolens.runs import summarize_run
from tests.distributed.runs import DistributedRun, rank_of, slow_loader_2  # noqa: F401

SHIFT_US = 1_500_000  # 1.5 s, in the trace's microseconds


def _shifted_copy(run: DistributedRun, dest: Path, rank: int, shift_us: float) -> Path:
    """The run's traces in ``dest``, ``rank``'s with every event's ``ts`` moved by ``shift_us``."""
    dest.mkdir()
    for trace in run.traces:
        target = dest / trace.name
        if rank_of(trace) != rank:
            shutil.copy(trace, target)
            continue
        doc = json.loads(gzip.decompress(trace.read_bytes()))
        for event in doc["traceEvents"]:
            if "ts" in event:
                event["ts"] = float(event["ts"]) + shift_us
        target.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dest


@pytest.fixture(scope="module")
def runs(slow_loader_2: DistributedRun, tmp_path_factory: pytest.TempPathFactory):  # noqa: F811
    base = tmp_path_factory.mktemp("clock-shift")
    plain = _shifted_copy(slow_loader_2, base / "plain", 1, 0.0)
    shifted = _shifted_copy(slow_loader_2, base / "shifted", 1, SHIFT_US)
    return summarize_run(plain, "local:1", cache=False), summarize_run(shifted, "local:1", cache=False)


def test_offset_recovers_the_shift(runs) -> None:
    plain, shifted = runs
    before = clock_offsets(plain).row(1, named=True)
    after = clock_offsets(shifted).row(1, named=True)
    assert after["rank"] == 1 and after["reference"] == 0 and after["calls"] > 0
    estimated_us = (after["offset_ms"] - before["offset_ms"]) * 1e3
    assert abs(estimated_us - SHIFT_US) <= max(0.1 * SHIFT_US, 50.0)
    # and on the run as recorded (one host), the two clocks agree to far less than a step
    assert abs(before["offset_ms"]) < 50.0
    assert after["spread_us"] is not None


def test_raw_timestamps_would_be_wrong(runs) -> None:
    """What the alignment prevents: the shifted rank's raw starts lie 1.5 s after rank 0's."""
    _, shifted = runs
    calls = aligned_calls(shifted)
    raw = calls.group_by("group", "collective", "seq").agg(gap=pl.col("ts").max() - pl.col("ts").min())
    assert raw["gap"].min() > 1e9  # ns: every matched call looks 1 s or more apart unaligned
    assert calls["arrival_skew_ns"].max() < 1e9


def _same(a: pl.DataFrame, b: pl.DataFrame, name: str) -> None:
    """Equal but for float rounding: the shifted file's µs floats round to ns a nanosecond apart at most."""
    assert a.columns == b.columns and a.height == b.height, name
    for col in a.columns:
        if a[col].dtype.is_float():
            diff = (a[col] - b[col]).abs().max()
            assert diff is None or diff < 1e-3, (name, col, diff)  # under 1 µs in ms columns, 1 ns in µs ones
        else:
            assert a[col].equals(b[col]), (name, col)


def test_dist_figures_do_not_move_with_the_shift(runs) -> None:
    plain, shifted = (dist_report(r) for r in runs)
    assert plain.skew.height and plain.stragglers["arrival_ms"].drop_nulls().len() == 2
    for name in ("ranks", "steps", "dimensions", "collectives", "skew", "stragglers"):
        _same(plain.tables()[name], shifted.tables()[name], name)
