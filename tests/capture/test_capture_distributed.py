"""Real multi-process DDP (gloo, CPU) under kinetolens: one trace per rank,
rank and world size in the metadata, and each rank's collectives in its own
trace as kinetolens reads it back.

The runs are the shared fixtures of :mod:`tests.distributed.runs`: two ranks
under ``kinetolens run -- torchrun --standalone`` and four spawned ranks in
``kinetolens.profile``.
"""

from __future__ import annotations

import gzip
import json
import socket
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import polars as pl

import kinetolens
from tests.distributed.runs import DistributedRun, rank_of, spawn_4, torchrun_2  # noqa: F401

HOST = socket.gethostname()
# Which ProfilerStep#s each launch mode records (see ddp_job.py).
RECORDED = {"torchrun": [1, 2], "spawn": [2, 3]}
# DDP's gradient bucket holds every parameter: 8*16+16 + 16*4+4 elements.
GRAD_ELEMENTS = 212

RUNS = pytest.mark.parametrize("run_fixture", ["torchrun_2", "spawn_4"])


@pytest.fixture
def ddp(request: pytest.FixtureRequest, run_fixture: str) -> DistributedRun:
    return request.getfixturevalue(run_fixture)


def metadata(trace: Path) -> dict[str, Any]:
    return json.loads(trace.with_name(trace.name.replace(".pt.trace.json.gz", ".kinetolens.json")).read_text())


def raw_trace(trace: Path) -> dict[str, Any]:
    with gzip.open(trace, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@RUNS
def test_one_trace_per_rank(ddp: DistributedRun) -> None:
    n = ddp.world_size
    assert [rank_of(t) for t in ddp.traces] == list(range(n)), ddp.output[-2000:]
    assert all(t.parent == ddp.run_dir for t in ddp.traces)
    assert [t.name.split(".")[0] for t in ddp.traces] == [f"{HOST}_rank{r}" for r in range(n)]
    # one metadata file per trace and nothing else in the run directory
    assert len(list(ddp.run_dir.iterdir())) == 2 * n
    pids = set()
    for rank, trace in enumerate(ddp.traces):
        meta = metadata(trace)
        assert (meta["rank"], meta["world_size"]) == (rank, n)
        assert meta["distributed"]["initialized"] is True
        assert meta["distributed"]["backend"] == "gloo"
        pids.add(meta["pid"])
        # torch's own record of the process group agrees
        info = raw_trace(trace)["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (rank, n, "gloo")
    assert len(pids) == n, "every rank is its own process"


@RUNS
def test_steps_recorded_on_every_rank(ddp: DistributedRun) -> None:
    for trace in ddp.traces:
        steps = kinetolens.load(trace, cache=False).steps
        assert steps["step"].to_list() == RECORDED[ddp.mode], trace.name


@RUNS
def test_collectives_visible_in_each_trace(ddp: DistributedRun) -> None:
    recorded = RECORDED[ddp.mode]
    for trace in ddp.traces:
        ops = kinetolens.load(trace, cache=False).ops
        # The c10d op on the training thread, one per all-reduce call: DDP's
        # gradient bucket and the loss, in every recorded step.
        c10d = ops.filter(pl.col("name") == "c10d::allreduce_")
        assert c10d.height == 2 * len(recorded), trace.name
        assert sorted(c10d["step"].to_list()) == sorted(recorded * 2)
        assert sorted(c10d["input_dims"].to_list()) == sorted(
            [f"[[[{GRAD_ELEMENTS}]], [], [], [], [], []]", "[[[]], [], [], [], [], []]"] * len(recorded)
        )
        # gloo's own range, on gloo's worker thread, with the payload's shape
        gloo = ops.filter(pl.col("name") == "gloo:all_reduce")
        assert sorted(gloo["input_dims"].to_list()) == sorted([f"[[{GRAD_ELEMENTS}]]", "[[]]"] * len(recorded))
        assert set(gloo["input_types"].to_list()) == {'["float"]'}
        assert not set(gloo["tid"].to_list()) & set(c10d["tid"].to_list())


@RUNS
def test_model_ops_keep_their_modules(ddp: DistributedRun) -> None:
    """Distributed traces are as attributable as single-process ones: the
    forward matmuls sit in the wrapped model's Linear modules."""
    for trace in ddp.traces:
        ops = kinetolens.load(trace, cache=False).ops
        modules = ops.filter(pl.col("name") == "aten::addmm")["module"].to_list()
        assert sorted(modules) == sorted(
            ["DistributedDataParallel_0.Sequential_0.Linear_0", "DistributedDataParallel_0.Sequential_0.Linear_1"]
            * len(RECORDED[ddp.mode])
        ), trace.name
