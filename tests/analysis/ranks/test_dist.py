"""The distributed view's numbers on a real gloo DDP run with a planted
straggler: two spawned ranks, rank 1 loading each batch 50 ms later (a sleep
in its ``Dataset.__getitem__``), DDP's gradients in several buckets whose
all-reduces run together on gloo's two threads (tests/distributed/ddp_job.py).
Both ranks exit in the middle of the third recorded step.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import kinetolens
from kinetolens.analysis.ranks.collectives import compute_and_comm_intervals
from kinetolens.analysis.gputime.gpu_streams import covered_ns
from kinetolens.analysis.ranks.distributed import RankSummary, collective_stats, matched_calls, step_times
from kinetolens.analysis.ranks.stragglers import straggler_findings, stragglers
from kinetolens.cli.main import main
from kinetolens.runs import summarize_run
from tests.distributed.runs import (  # noqa: F401
    CUT_STEP,
    DELAY_MS,
    SLOW_RANK,
    WHOLE_STEPS,
    DistributedRun,
    slow_loader_2,
    spawn_4,
)


@pytest.fixture(scope="module")
def slow(slow_loader_2: DistributedRun) -> list[RankSummary]:  # noqa: F811
    return summarize_run(slow_loader_2.run_dir, "local:1", cache=False)


def test_concurrent_buckets_really_overlap(slow: list[RankSummary]) -> None:
    """The premise: on the waiting rank, the next bucket's all-reduce starts
    while the first one waits for the late rank."""
    (waiter,) = [s for s in slow if s.rank != SLOW_RANK]
    c = waiter.calls.sort("ts")
    ends = (c["ts"] + c["dur"]).cum_max().shift(1)
    assert (c["ts"] < ends).sum() >= 2, "no overlapping collectives"


def test_waiting_is_never_more_than_the_step(
    slow: list[RankSummary], slow_loader_2: DistributedRun  # noqa: F811
) -> None:
    # the waits of concurrent calls are a union, not a sum
    steps = {r["rank"]: r for r in step_times(slow).iter_rows(named=True)}
    row = stragglers(slow).filter(pl.col("rank") == SLOW_RANK).row(0, named=True)
    waiter = steps[1 - SLOW_RANK]
    assert row["cost_ms_per_step"] <= waiter["step_ms"]
    # rank 0 waits about the planted delay each step (the bound leaves room
    # for a busy machine), within its communication
    assert 0.7 * DELAY_MS <= row["cost_ms_per_step"] <= waiter["comm_ms"] + 1e-6
    # the collective's time is the ranks' time in communication over the
    # trace (the table covers it all), never more: all-reduce is the run's
    # only collective, so the two are the same union of gloo ranges
    (stats,) = collective_stats(slow).iter_rows(named=True)
    comm_ns = [covered_ns(compute_and_comm_intervals(kinetolens.load(t))[1]) for t in slow_loader_2.traces]
    assert stats["time_ms"] == pytest.approx(sum(comm_ns) / len(comm_ns) / 1e6, rel=1e-9)
    assert 0 <= stats["sync_ms"] <= stats["time_ms"]
    assert stats["transfer_ms"] == pytest.approx(stats["time_ms"] - stats["sync_ms"])


def test_lateness_is_the_whole_gap(slow: list[RankSummary]) -> None:
    # against the earliest arrival, so with two ranks the
    # late rank is late by the full gap (the median, their midpoint, halves it)
    table = stragglers(slow)
    late = dict(zip(table["rank"], table["late_ms"], strict=True))
    # the full delay, not half of it (the bound leaves room for a busy machine,
    # where sleeps overrun: then the measured data loading grows with them)
    assert late[SLOW_RANK] >= 0.7 * DELAY_MS
    loading = table.filter(pl.col("rank") == SLOW_RANK)["excess_ms"].item()
    assert late[SLOW_RANK] == pytest.approx(loading, abs=0.3 * DELAY_MS)
    assert late[1 - SLOW_RANK] < 0.3 * DELAY_MS
    per_call = matched_calls(slow).group_by("collective", "seq").agg(
        pl.col("late_ns").min(), late_ns_max=pl.col("late_ns").max(), gap=pl.col("dur").max() - pl.col("dur").min()
    )
    assert (per_call["late_ns"] == 0).all()  # the earliest rank of every call
    assert (per_call["late_ns_max"] == per_call["gap"]).all()  # the last: the whole gap


def test_straggler_found_and_explained(slow: list[RankSummary]) -> None:
    # the finding says why: the slow rank's data loading
    table = stragglers(slow)
    assert table.filter(pl.col("straggler"))["rank"].to_list() == [SLOW_RANK]
    row = table.filter(pl.col("rank") == SLOW_RANK).row(0, named=True)
    assert row["differs_most"] == "dataloader"
    assert row["excess_ms"] >= 0.9 * DELAY_MS  # a sleep lasts at least its time
    assert row["caused_share"] > 0.9
    (finding,) = straggler_findings(slow, table)
    assert finding.where == {"rank": SLOW_RANK}
    assert f"Rank {SLOW_RANK} is late: its data loading takes" in finding.title
    assert "data loading takes" in finding.evidence and "ms more per step" in finding.evidence
    assert finding.saving_ms == pytest.approx(row["cost_ms_per_step"])


def test_ranks_compared_on_whole_steps(slow: list[RankSummary]) -> None:
    # A step the profiler cut short is in no per-step figure, on any rank
    for s in slow:
        assert s.cut_steps == [CUT_STEP]
        assert s.steps["step"].to_list() == WHOLE_STEPS == s.breakdown["step"].to_list()
    assert step_times(slow)["steps"].to_list() == [len(WHOLE_STEPS)] * 2
    # its collectives are still calls of the run
    assert any((s.calls["step"] == CUT_STEP).any() for s in slow)


def test_waits_within_a_step_on_four_ranks(spawn_4: DistributedRun) -> None:  # noqa: F811
    # four ranks without a planted delay (whether the
    # jitter of a busy machine makes one a straggler is left open): the
    # waiting caused by any rank, and by all together, fits in a step
    summaries = summarize_run(spawn_4.run_dir, "local:1", cache=False)
    table = stragglers(summaries)
    step_ms = step_times(summaries)["step_ms"].min()
    assert (table["cost_ms_per_step"] <= step_ms).all()
    assert table["caused_share"].sum() == pytest.approx(1.0)


def test_cli_names_the_cause(
    slow_loader_2: DistributedRun,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As a user reads `kinetolens dist` at 100 columns
    monkeypatch.setenv("COLUMNS", "100")
    main(["dist", str(slow_loader_2.run_dir), "--executor", "local:1", "--no-cache"])
    captured = capsys.readouterr()
    out = captured.out
    assert f"step {CUT_STEP} of rank 0, 1 was cut short by the end of profiling" in captured.err
    assert f"rank {SLOW_RANK} is late" in out.lower()
    assert "data loading takes" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    main(["dist", str(slow_loader_2.run_dir), "--executor", "local:1", "--no-cache", "--json"])
    data = json.loads(capsys.readouterr().out)
    (rec,) = data["recommendations"]
    assert rec["where"] == {"rank": SLOW_RANK} and "data loading" in rec["title"]
