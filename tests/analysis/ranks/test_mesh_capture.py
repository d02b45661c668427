"""A real 2 x 2 DeviceMesh job (FSDP2 over ``dp``, tensor parallel over ``tp``, gloo, CPU).

Gloo records no process group per call, and ``distributedInfo`` lists three
(``default_pg``, ``mesh_dp``, ``mesh_tp``).  Every call used to be booked
on the default group as data parallel over the whole world: the tensor-
parallel all-reduces and FSDP's collectives together, on a group none of
them ran on.  Now FSDP's calls (issued inside its ranges; its reduce-scatter
runs on gloo as an all-reduce) are data parallel on the rank's ``mesh_dp``
group, and the others are said to be on a group the trace does not record.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.ranks.collectives import NOT_RECORDED, collective_calls
from kinetolens.logdir import one_run
from tests.terminal import run_cli

JOB = Path(__file__).resolve().parents[2] / "distributed" / "mesh_job.py"
#: One rank's FSDP shard of the MLP's parameters, in elements: each tensor-parallel half
#: (256x256 + 256 column-wise, 256x256 row-wise + its 256 replicated bias) split over dp.
SHARD = (256 * 256 + 256 + 256 * 256 + 256) // 2
#: Tensor parallelism's all-reduce: the (64, 256) float32 output of the row-wise layer.
TP_BYTES = 64 * 256 * 4


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mesh")
    done = subprocess.run([sys.executable, str(JOB), str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def calls(run_dir: Path) -> dict[int, pl.DataFrame]:
    traces = one_run(run_dir)
    assert sorted(t.rank for t in traces) == [0, 1, 2, 3]
    return {t.rank: collective_calls(kinetolens.load(t.path, cache=False)) for t in traces}


def test_fsdp_calls_are_data_parallel_on_the_ranks_own_dp_group(calls: dict[int, pl.DataFrame]) -> None:
    for rank, c in calls.items():
        fsdp = c.filter(pl.col("group_desc") == "mesh_dp")
        # two steps: an all-gather in forward, a reduce-scatter (gloo: an all-reduce) in backward
        assert sorted(fsdp["kind"].to_list()) == ["allgather", "allgather", "allreduce", "allreduce"], (rank, c)
        assert set(fsdp["dimension"]) == {"data"}
        assert set(fsdp["group_ranks"]) == {"[0, 2]" if rank % 2 == 0 else "[1, 3]"}
        gathered = fsdp.filter(pl.col("kind") == "allgather")["bytes"].to_list()
        assert gathered == [SHARD * 4] * 2  # no message sizes recorded: the input tensor, as torch-tb-profiler


def test_calls_the_trace_does_not_place_are_said_unknown_not_the_world_group(calls: dict[int, pl.DataFrame]) -> None:
    for rank, c in calls.items():
        assert "default_pg" not in set(c["group_desc"].drop_nulls())
        rest = c.filter((pl.col("group") == NOT_RECORDED) & (pl.col("kind") == "allreduce"))
        assert rest.height == 2, (rank, c)
        assert set(rest["dimension"]) == {"unknown"} and set(rest["bytes"]) == {TP_BYTES}
        assert rest["basis"][0] == "the trace records no group for the call, and this rank is in 3 (default_pg, mesh_dp, mesh_tp)"


def test_an_all_to_all_is_expert_traffic_though_its_group_is_not_recorded(calls: dict[int, pl.DataFrame]) -> None:
    for rank, c in calls.items():
        dispatch = c.filter(pl.col("kind") == "alltoall")
        assert dispatch.height == 2, (rank, c)  # one per profiled step
        assert set(dispatch["dimension"]) == {"expert"} and set(dispatch["group"]) == {NOT_RECORDED}
        assert dispatch["basis"][0].startswith("collective: all-to-all")
        assert set(dispatch["bytes"]) == {64 * 256 * 4}  # the (64, 256) float32 input rows


def test_dist_shows_the_dp_groups_and_the_unplaced_calls_at_80_columns(run_dir: Path) -> None:
    out = run_cli("dist", "--no-cache", str(run_dir), columns=80)
    assert out.returncode == 0, out.stderr
    assert "mesh_dp" in out.stdout and "FSDP issued it" in out.stdout
    assert "the trace records no group for the call" in out.stdout
    assert "default_pg" in out.stdout.split("unknown", 1)[-1]  # named among the groups, not as a call's group
    assert all(len(line) <= 80 for line in out.stdout.splitlines())
