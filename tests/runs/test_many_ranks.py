"""Many-rank runs: 64 and 256 generated ranks with one planted straggler,
and the same per-rank work on a real Dask cluster (scheduler and workers as
separate processes on loopback) giving the same results as the local pool."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import kinetolens
from kinetolens.analysis.ranks.collectives import collective_calls
from kinetolens.analysis.ranks.distributed import RankSummary, collective_stats, step_times
from kinetolens.analysis.ranks.stragglers import straggler_findings, stragglers
from kinetolens.runs import LocalExecutor, executor_for, summarize_run
from kinetolens.runs.executors import DaskExecutor, pool_size
from tests.conftest import trace_path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gen_ranks import generate

SOURCE = "hta/trace_filter/sampled_rank-0.json.gz"


def make_run(
    tmp: Path, ranks: int, straggler: int | None, keep_every: int = 8, seed: int = 1
) -> Path:
    generate(
        trace_path(SOURCE), tmp, ranks, straggler, keep_every=keep_every, seed=seed
    )
    return tmp


def flagged(summaries: list[RankSummary]) -> list[int]:
    return stragglers(summaries).filter(pl.col("straggler"))["rank"].to_list()


def test_64_ranks_straggler_found(tmp_path: Path) -> None:
    summaries = summarize_run(make_run(tmp_path, 64, straggler=17), "local")
    assert len(summaries) == 64 and summaries[0].world_size == 64
    table = stragglers(summaries)
    assert flagged(summaries) == [17]
    row = table.filter(pl.col("rank") == 17).row(0, named=True)
    assert row["last_share"] == 1.0  # last at every collective
    # It arrives 0.6..0.7 of each call's duration late, the earliest of the
    # other 63 close to 0: per step, its largest lateness is 0.6..0.7 of the
    # step's longest call (against the earliest rank).
    source = collective_calls(kinetolens.load(trace_path(SOURCE)))
    longest = source.group_by("step").agg(pl.col("dur").max())["dur"].mean() / 1e6
    assert 0.6 * longest <= row["late_ms"] <= 0.7 * longest
    assert row["caused_share"] > 0.99  # nearly all waiting is for it
    # The 63 others wait for it at all 10 calls (5 per step).
    assert row["cost_ms_per_step"] > 50
    finding = straggler_findings(summaries, table)
    assert [f.where["rank"] for f in finding] == [17]
    assert finding[0].saving_ms == pytest.approx(row["cost_ms_per_step"])


def test_64_ranks_without_straggler(tmp_path: Path) -> None:
    summaries = summarize_run(make_run(tmp_path, 64, straggler=None), "local")
    assert flagged(summaries) == []
    assert (
        stragglers(summaries)["last_share"].max() < 0.5
    )  # jitter: the last rank changes call to call


def test_256_ranks_straggler_found(tmp_path: Path) -> None:
    summaries = summarize_run(
        make_run(tmp_path, 256, straggler=200, keep_every=64), LocalExecutor(workers=2)
    )
    assert len(summaries) == 256
    assert flagged(summaries) == [200]


def test_pool_is_memory_aware(tmp_path: Path) -> None:
    paths = make_run(tmp_path, 4, None).glob("*.json.gz")
    paths = sorted(paths)
    assert pool_size(paths, memory_budget=1 << 40, cpus=16) == 4  # one per file
    assert pool_size(paths, memory_budget=1 << 40, cpus=2) == 2  # one per core
    assert (
        pool_size(paths, memory_budget=1, cpus=16) == 1
    )  # nothing fits: one at a time


def test_ranks_read_a_step_window_at_a_time_are_planned_at_a_windows_memory(tmp_path: Path) -> None:
    # A rank read a step window at a time peaks at a step's memory, not its
    # size's: the pool plans it at WINDOWED_PEAK_BYTES and runs more at once.
    from kinetolens.runs.window_choice import WINDOWED_PEAK_BYTES

    paths = sorted(make_run(tmp_path, 4, None).glob("*.json.gz"))
    whole = 6 * max(p.stat().st_size for p in paths) * 10  # each file's estimate, by its size
    budget = whole * 2
    assert pool_size(paths, memory_budget=budget, cpus=16) <= 2
    assert pool_size(paths, memory_budget=budget, cpus=16, peaks=[whole // 8] * 4) == 4
    assert pool_size(paths, memory_budget=WINDOWED_PEAK_BYTES * 3, cpus=16, peaks=[WINDOWED_PEAK_BYTES] * 4) == 3


class _Recording:
    """An executor that runs the work here and keeps what it was given (the jobs' planned peaks)."""

    name = "recording"

    def __init__(self) -> None:
        self.items: list = []

    def map(self, fn, items):  # type: ignore[no-untyped-def]
        self.items = list(items)
        return [fn(i) for i in items]


def test_only_the_summary_of_a_rank_read_in_windows_plans_a_windows_memory(tmp_path: Path) -> None:
    # summarize_run reads such ranks a step window at a time; the graphs of a
    # run load every rank whole, and must not be planned at a window's memory.
    from kinetolens.runs.graphs import run_graphs
    from kinetolens.runs.window_choice import WINDOWED_PEAK_BYTES

    run = make_run(tmp_path, 2, None)
    for windows, planned in ((True, WINDOWED_PEAK_BYTES), (False, None), (None, None)):  # None: by size (small files: whole)
        ex = _Recording()
        assert len(summarize_run(run, ex, cache=False, windows=windows)) == 2
        assert [job.peak_bytes for job in ex.items] == [planned, planned], windows
    ex = _Recording()
    run_graphs(run, ex, cache=False)
    assert [job.peak_bytes for job in ex.items] == [None, None]


def test_executor_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    assert isinstance(executor_for(None), LocalExecutor)
    assert executor_for("local:3").workers == 3  # type: ignore[attr-defined]
    assert executor_for("dask://10.0.0.1:8786").address == "tcp://10.0.0.1:8786"  # type: ignore[attr-defined]
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:9999")
    assert isinstance(executor_for(None), DaskExecutor)


def _tables(summaries: list[RankSummary]) -> list[pl.DataFrame]:
    return [step_times(summaries), collective_stats(summaries), stragglers(summaries)]


def test_dask_local_cluster_same_as_local(tmp_path: Path) -> None:
    """Scheduler and two single-threaded worker processes on 127.0.0.1; the
    workers load the traces (and fill the cache) themselves."""
    distributed = pytest.importorskip("distributed")
    run = make_run(tmp_path / "run", 12, straggler=3)
    local = summarize_run(run, LocalExecutor(workers=2), cache=tmp_path / "local-cache")
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        remote = summarize_run(run, f"dask://{cluster.scheduler_address.removeprefix('tcp://')}",
                               cache=tmp_path / "dask-cache")  # fmt: skip
    assert [s.rank for s in remote] == list(range(12))
    for a, b in zip(_tables(local), _tables(remote), strict=True):
        assert_frame_equal(a, b)
    assert flagged(remote) == [3]
    assert (
        len(list((tmp_path / "dask-cache").rglob("*"))) > 0
    )  # workers wrote the cache


def test_unreachable_scheduler_is_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    from kinetolens.errors import TraceError

    run = make_run(tmp_path, 2, None)
    with pytest.raises(TraceError, match="cannot reach the Dask scheduler"):
        summarize_run(run, DaskExecutor("tcp://127.0.0.1:1", connect_timeout_s=2))
