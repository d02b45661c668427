"""The distributed view on real multi-rank runs: HTA's 2-rank ``trace_filter``
pair (NCCL, A100s of a 128-rank job) against torch-tb-profiler's figures,
and real gloo DDP runs (two torchrun ranks, four spawned ranks)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.ranks.collectives import (
    bus_factor,
    collective_calls,
    comm_overlap_per_step,
)
from kinetolens.analysis.ranks.distributed import (
    collective_stats,
    matched_calls,
    rank_collective_stats,
    rank_summary,
    step_spread,
    step_times,
)
from kinetolens.cli.main import main
from kinetolens.runs import summarize_run
from tests.conftest import GOLDEN, trace_path
from tests.distributed.runs import DistributedRun, spawn_4, torchrun_2  # noqa: F401

PAIR = "hta/trace_filter"


def tb_golden(rank: int) -> dict:
    return json.loads(
        (
            GOLDEN
            / "tb_plugin"
            / f"hta__trace_filter__sampled_rank-{rank}.json.gz.json"
        ).read_text()
    )


@pytest.fixture(scope="module")
def pair() -> list:
    trace_path(f"{PAIR}/sampled_rank-0.json.gz")
    return summarize_run(trace_path(PAIR), "local")


@pytest.mark.parametrize("rank", [0, 1])
def test_all_reduce_stats_equal_tb_plugin(rank: int) -> None:
    """Calls, bytes and time of ``nccl:all_reduce`` per worker, as tb-plugin counts them.

    tb-plugin times a call by its host range plus the kernels whose
    external id is the call's; in this sampled trace the kernels' external
    ids are not the ops' (the sampler renumbered them), so its time is the
    host ranges alone, which is our ``host_us``.  Its "real time" column is 0
    because it is only filled when workers are matched."""
    calls, size, time_us, real_us = tb_golden(rank)["total_comm_stats"][
        "nccl:all_reduce"
    ]
    summary = rank_summary(
        kinetolens.load(trace_path(f"{PAIR}/sampled_rank-{rank}.json.gz"))
    )
    row = (
        rank_collective_stats(summary)
        .filter(pl.col("collective") == "all_reduce")
        .row(0, named=True)
    )
    assert row["calls"] == calls == 4
    assert row["bytes"] == size  # sum of input elements x 4 bytes (float)
    assert row["host_us"] == pytest.approx(time_us, abs=0.5)
    assert real_us == 0
    # tb-plugin knows five nccl: names only; the run also has these, with kernels
    others = rank_collective_stats(summary).filter(pl.col("collective") != "all_reduce")
    assert sorted(others["collective"].to_list()) == ["_all_gather_base", "all_to_all"]
    assert (others["device_us"] > 0).all()


@pytest.mark.parametrize("rank", [0, 1])
def test_step_overlap_against_tb_plugin(rank: int) -> None:
    """tb-plugin's "computation" here is every kernel (it could not tie the
    NCCL kernels to their calls, see above) and its "communication" the host
    ranges of ``nccl:all_reduce``.  Our computation and communication
    together (union) are that same set of kernels, to the microsecond; our
    communication is the NCCL kernels (~190 ms a step, not tb's 0.2 ms of
    host enqueue), which is what the GPU spends on collectives."""
    golden = tb_golden(rank)["comm_overlap_per_step_us"]
    steps = comm_overlap_per_step(
        kinetolens.load(trace_path(f"{PAIR}/sampled_rank-{rank}.json.gz"))
    )
    assert steps.height == len(golden) == 2
    for ours, tb in zip(steps.iter_rows(named=True), golden, strict=True):
        busy_us = (ours["compute_ns"] + ours["comm_ns"] - ours["overlap_ns"]) / 1e3
        assert busy_us == pytest.approx(tb["computation"], abs=1.0)
        step_us = tb["computation"] + tb["communication"] - tb["overlap"] + tb["other"]
        assert ours["step_ns"] / 1e3 == pytest.approx(step_us, abs=1.0)
        assert ours["comm_ns"] > 100 * tb["communication"] * 1e3 / 1e3
        assert 0 < ours["overlap_ns"] < min(ours["compute_ns"], ours["comm_ns"])


def test_sync_and_transfer_per_call(pair: list) -> None:
    """tb-plugin's rule, checked on one call by hand: the first all-reduce
    runs 11.727 ms on rank 0 and 8.370 ms on rank 1, so 8.370 ms is transfer
    and rank 0 waited 3.357 ms for rank 1."""
    m = matched_calls(pair)
    first = m.filter(
        (pl.col("collective") == "all_reduce") & (pl.col("seq") == 0)
    ).sort("rank")
    assert first["dur"].to_list() == [11_727_000, 8_370_000]
    assert first["transfer_ns"].to_list() == [8_370_000, 8_370_000]
    assert first["sync_ns"].to_list() == [3_357_000, 0]
    assert first["last"].to_list() == [False, True]
    # every call: one last rank, nobody waits less than zero, dur = sync + transfer
    per_call = m.group_by("collective", "seq").agg(
        pl.col("last").sum(), pl.col("sync_ns").min()
    )
    assert per_call["last"].to_list() == [1] * per_call.height == [1] * 10
    assert (per_call["sync_ns"] == 0).all()
    assert (m["dur"] == m["sync_ns"] + m["transfer_ns"]).all()


def test_collective_stats_bus_bandwidth(pair: list) -> None:
    stats = {r["collective"]: r for r in collective_stats(pair).iter_rows(named=True)}
    ar = stats["all_reduce"]
    assert ar["calls"] == 4
    # mean over the two ranks of tb-plugin's per-worker bytes
    assert ar["bytes"] == (314_195_708 + 284_846_792) / 2
    assert ar["time_ms"] == pytest.approx(ar["sync_ms"] + ar["transfer_ms"])
    # world size 128 from distributedInfo: all-reduce busbw = algbw x 2*127/128
    assert ar["busbw_gbps"] / ar["algbw_gbps"] == pytest.approx(2 * 127 / 128)
    a2a = stats["all_to_all"]
    assert a2a["busbw_gbps"] / a2a["algbw_gbps"] == pytest.approx(127 / 128)
    assert bus_factor("broadcast", 8) == 1.0 and bus_factor("allgather", 4) == 0.75


def test_step_spread(pair: list) -> None:
    per_rank = step_times(pair)
    assert per_rank["rank"].to_list() == [0, 1]
    assert per_rank["step_ms"].to_list() == pytest.approx(
        [615.120, 619.2715]
    )  # tb-plugin's step totals
    spread = step_spread(pair)
    assert spread["spread_ms"].to_list() == pytest.approx([0.592, 7.711])
    assert spread["slowest_rank"].to_list() == [1, 1]


def test_cli_dist_json(capsys: pytest.CaptureFixture[str]) -> None:
    main(["dist", str(trace_path(PAIR)), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["run"]["ranks"] == 2 and out["run"]["world_size"] == 128
    assert {r["collective"] for r in out["collectives"]} == {
        "all_reduce",
        "all_to_all",
        "_all_gather_base",
    }
    assert not any(
        r["straggler"] for r in out["stragglers"]
    )  # two ranks, neither last at every call
    assert out["recommendations"] == []


def test_bad_run_directories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["dist", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds no trace files" in err
    # two files claiming the same rank would double-count it: the newest is
    # used, and a note says so
    src = trace_path(f"{PAIR}/sampled_rank-0.json.gz")
    shutil.copy(src, tmp_path / "rank-0.json.gz")
    shutil.copy(src, tmp_path / "copy_rank-5.json.gz")
    os.utime(tmp_path / "rank-0.json.gz", ns=(1, 1))  # the older of the two
    notes: list[str] = []
    (only,) = summarize_run(tmp_path, notes=notes)
    assert only.rank == 0 and Path(only.path).name == "copy_rank-5.json.gz"
    assert len(notes) == 1 and "more than one trace of rank 0" in notes[0] and "rank-0.json.gz" in notes[0]


# --- real gloo DDP runs -------------------------------------------------------

RUNS = pytest.mark.parametrize("run_fixture", ["torchrun_2", "spawn_4"])
GRAD_BYTES = 212 * 4  # DDP's one bucket of float gradients
LOSS_BYTES = 4


@pytest.fixture
def ddp(request: pytest.FixtureRequest, run_fixture: str) -> DistributedRun:
    return request.getfixturevalue(run_fixture)


@RUNS
def test_gloo_collectives_per_rank(ddp: DistributedRun) -> None:
    for trace in ddp.traces:
        calls = collective_calls(kinetolens.load(trace))
        # two recorded steps, each: the gradient bucket and the logged loss
        assert (
            sorted(calls["bytes"].to_list()) == [LOSS_BYTES] * 2 + [GRAD_BYTES] * 2
        ), trace.name
        assert set(calls["kind"]) == {"allreduce"} and (calls["kernels"] == 0).all()
        assert (
            calls["dur"] == calls["host_dur"]
        ).all()  # gloo works on its own CPU thread


@RUNS
def test_gloo_run_matched_across_ranks(ddp: DistributedRun) -> None:
    summaries = summarize_run(ddp.run_dir)
    assert [s.rank for s in summaries] == list(range(ddp.world_size))
    assert {s.backend for s in summaries} == {"gloo"}
    m = matched_calls(summaries)
    assert m.height == 4 * ddp.world_size
    assert (m["n_ranks"] == ddp.world_size).all()
    per_call = m.group_by("collective", "seq").agg(
        pl.col("last").sum(), pl.col("bytes").n_unique()
    )
    assert (per_call["last"] == 1).all() and (per_call["bytes"] == 1).all()
    assert (m["sync_ns"] >= 0).all() and (m["transfer_ns"] > 0).all()
    stats = collective_stats(summaries).row(0, named=True)
    assert stats["calls"] == 4 and stats["bytes"] == 2 * (GRAD_BYTES + LOSS_BYTES)
    # per step: the communication is gloo's ranges, inside the step
    for s in summaries:
        assert s.steps.height == 2
        assert (s.steps["comm_ns"] > 0).all() and (s.steps["compute_ns"] > 0).all()
        busy = s.steps["compute_ns"] + s.steps["comm_ns"] - s.steps["overlap_ns"]
        assert (busy <= s.steps["step_ns"]).all()


def test_gloo_cli_dist(
    spawn_4: DistributedRun,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["dist", str(spawn_4.run_dir), "--executor", "local:2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["run"] == {**out["run"], "ranks": 4, "world_size": 4, "backend": "gloo"}
    assert [r["rank"] for r in out["ranks"]] == [0, 1, 2, 3]
    assert sorted(r["rank"] for r in out["stragglers"]) == [0, 1, 2, 3]
