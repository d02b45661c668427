"""Bus bandwidth from measured transfers only: an NCCL call whose kernels were
not captured has only its host range (the enqueue, microseconds), which must
not count as transfer time.  HTA's 2-rank NCCL pair (A100s), rewritten with
the kernel of one all-reduce dropped on both ranks, as a profiler that lost
those kernels (or a trace filter that removed them) leaves it."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.ranks.collectives import collective_calls
from kinetolens.analysis.ranks.distributed import (
    collective_stats,
    matched_calls,
    rank_collective_stats,
)
from kinetolens.analysis.ranks.stragglers import stragglers
from kinetolens.runs import summarize_run
from tests.conftest import trace_path
from tests.distributed.runs import DistributedRun, spawn_4  # noqa: F401

PAIR = "hta/trace_filter"
DROPPED = ("all_reduce", 0)  # (collective, seq) whose kernels are lost


def _without_call_kernels(src: Path, dst: Path) -> int:
    """Copy ``src`` without the NCCL kernel of the :data:`DROPPED` call; its start (ns)."""
    calls = collective_calls(kinetolens.load(src, cache=False))
    (start,) = calls.filter(
        (pl.col("collective") == DROPPED[0]) & (pl.col("seq") == DROPPED[1])
    )["ts"].to_list()
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    kept = [
        e for e in doc["traceEvents"]
        if not (e.get("cat") == "kernel" and str(e.get("name", "")).lower().startswith("nccl")
                and round(Decimal(str(e["ts"])) * 1000) == start)
    ]  # fmt: skip
    assert len(kept) == len(doc["traceEvents"]) - 1
    with gzip.open(dst, "wt", encoding="utf-8") as fh:
        json.dump({**doc, "traceEvents": kept}, fh)
    return start


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, list]:
    """(intact pair, pair with the dropped kernels), as run summaries."""
    lost = tmp_path_factory.mktemp("lost-kernels")
    for rank in (0, 1):
        src = trace_path(f"{PAIR}/sampled_rank-{rank}.json.gz")
        _without_call_kernels(src, lost / src.name)
    intact = summarize_run(trace_path(PAIR), "local:1", cache=False)
    return intact, summarize_run(lost, "local:1", cache=False)


def _is_dropped() -> pl.Expr:
    return (pl.col("collective") == DROPPED[0]) & (pl.col("seq") == DROPPED[1])


def test_kernel_less_nccl_call_is_untimed(runs: tuple[list, list]) -> None:
    _, lost = runs
    for s in lost:
        dropped = s.calls.filter(_is_dropped())
        assert dropped["kernels"].to_list() == [0] and dropped["timed"].to_list() == [False]
        assert s.calls.filter(~_is_dropped())["timed"].all()
        # its host enqueue stays host time, never device time
        intact_row = rank_collective_stats(s).filter(pl.col("collective") == "all_reduce").row(0, named=True)
        timed_us = s.calls.filter(pl.col("timed") & (pl.col("collective") == "all_reduce"))["dur"].sum() / 1e3
        assert intact_row["device_us"] == pytest.approx(timed_us)
    m = matched_calls(lost)
    assert m.filter(_is_dropped()).height == 0  # no arrival read from an enqueue


def test_bandwidth_from_timed_calls_only(runs: tuple[list, list]) -> None:
    # the other three all-reduces' bytes over their transfer time
    intact, lost = runs
    m = matched_calls(intact).filter((pl.col("collective") == "all_reduce") & ~_is_dropped())
    expected_algbw = m["bytes"].sum() / m["transfer_ns"].sum()
    row = collective_stats(lost).filter(pl.col("collective") == "all_reduce").row(0, named=True)
    assert row["algbw_gbps"] == pytest.approx(expected_algbw, rel=1e-9)
    assert row["calls"] == 4 and row["untimed_calls"] == 1
    assert row["busbw_gbps"] / row["algbw_gbps"] == pytest.approx(2 * 127 / 128)
    # the time split holds over the timed calls
    assert row["time_ms"] == pytest.approx(row["sync_ms"] + row["transfer_ms"])
    assert row["time_ms"] == pytest.approx(m["dur"].sum() / 1e6 / 2)
    # a call of microseconds for 78 MB would have read as ~800 GB/s on its own
    full = collective_stats(intact).filter(pl.col("collective") == "all_reduce").row(0, named=True)
    assert row["busbw_gbps"] < 2 * full["busbw_gbps"]
    # the other collectives are untouched
    others = collective_stats(lost).filter(pl.col("collective") != "all_reduce").sort("collective")
    assert others.drop("untimed_calls").equals(
        collective_stats(intact).filter(pl.col("collective") != "all_reduce").sort("collective").drop("untimed_calls")
    )
    stragglers(lost)  # still runs with a call missing on every rank


def test_gloo_keeps_its_host_time(spawn_4: DistributedRun) -> None:  # noqa: F811
    # gloo does its transfer on the host: its range is the call's time
    summaries = summarize_run(spawn_4.run_dir, "local:1", cache=False)
    for s in summaries:
        assert s.calls["timed"].all() and (s.calls["kernels"] == 0).all()
    stats = collective_stats(summaries).row(0, named=True)
    assert stats["untimed_calls"] == 0 and stats["algbw_gbps"] > 0


def test_trace_without_kernels_has_no_bandwidth(tmp_path: Path) -> None:
    # HTA's rank_non_gpu trace records NCCL all-to-alls
    # (backend nccl) but no GPU activity at all: six calls, none timed
    run = tmp_path / "run"
    run.mkdir()
    src = trace_path("hta/rank_non_gpu/rank_non_gpu.json.gz")
    (run / src.name).write_bytes(src.read_bytes())
    (row,) = collective_stats(summarize_run(run, "local:1", cache=False)).iter_rows(named=True)
    assert row["busbw_gbps"] is None and row["algbw_gbps"] is None
    assert (row["calls"], row["untimed_calls"]) == (6, 6)
    assert row["time_ms"] is None and row["transfer_ms"] is None
