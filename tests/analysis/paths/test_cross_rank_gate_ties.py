"""Which rank gates a step across ranks, and a path that is the same every run.

Part 1: two real gloo captures (2 ranks, rank 1 sleeping 50 ms in its
DataLoader) in which rank 0 arrived last at the small all-reduces after
rank 1's sleep; counting collectives named rank 0's CPU ops although rank 1's
data loading is 75-93% of the path.  Part 2: every rank leaves a collective
with equal weight, so the path's rank after it must not depend on the process.
"""

from __future__ import annotations

import pickle
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kinetolens.analysis.paths.cross_rank_path import RankGraphs, cross_rank_path, joined_graph
from kinetolens.analysis.paths.longest_path import longest_path
from kinetolens.runs.graphs import run_graphs, run_paths
from tests.conftest import trace_path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from gen_ranks import generate

DATA = Path(__file__).parents[2] / "data" / "gloo_slow_loader_gate"
SLOW_RANK, DELAY_MS = 1, 50.0


@pytest.mark.parametrize("capture", ["f2", "f4"])
def test_gate_is_the_rank_whose_work_holds_the_path(capture: str) -> None:
    # captures where the old rule, the rank the path
    # arrives from at most collectives (1:1, broken by the longest hold), named rank 0.
    paths = run_paths(run_graphs(DATA / capture, "local:1", cache=False))
    assert [cp.step for cp in paths] == [2, 3]
    for cp in paths:
        loading = cp.path.filter(pl.col("bound_by") == "data_loading")
        assert loading["rank"].unique().to_list() == [SLOW_RANK]
        assert loading["us"].sum() > 0.7 * cp.length_us  # the case: rank 1's sleep is the path
        assert cp.gate_rank == SLOW_RANK
        assert cp.verdict.startswith(f"rank {SLOW_RANK}'s data loading holds ")
        # How long it held the other rank: its own hold, the sleep's (not rank 0's small calls).
        held = float(cp.verdict.rsplit(" for ", 1)[1].removesuffix(" ms"))
        assert held > 0.8 * DELAY_MS


def test_lowest_ties_pick_the_lowest_ids() -> None:
    # Fixed tie-break: two equal starts 1->2, 0->2 and two equal
    # ends 2->4, 2->3, given highest id first: the lowest ids win, at rustworkx's length.
    src = np.array([1, 0, 2, 2])
    dst = np.array([2, 2, 4, 3])
    w = np.array([5, 5, 1, 1])
    assert longest_path(src, dst, w, 5, ties="lowest") == [0, 2, 3]
    default = longest_path(src, dst, w, 5)
    assert sum(int(w[(src == a) & (dst == b)][0]) for a, b in zip(default, default[1:])) == 6


def _path_of(blob: bytes) -> tuple[list[int], list[int], str]:
    """In a fresh process (its own hash seed): the joined step's path nodes, ranks and verdict."""
    ranks: list[RankGraphs] = pickle.loads(blob)
    g = joined_graph(ranks, 551)
    cp = cross_rank_path(g)
    return g.longest()[1], cp.path["rank"].to_list(), cp.verdict


@pytest.fixture(scope="module")
def sixteen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen16")
    generate(trace_path("hta/trace_filter/sampled_rank-0.json.gz"), out, 16, 5, keep_every=0, plant=True, seed=3)
    return out


def test_cross_rank_path_same_every_run(sixteen: Path) -> None:
    # a generated 16-rank run whose ranks all leave the
    # straggler's (rank 5) collectives with equal weight; the path is the same node list
    # in this process, in spawned processes (each its own hash seed) and over executors.
    one = run_graphs(sixteen, "local:1", cache=False)
    two = run_graphs(sixteen, "local:2", cache=False)
    here = _path_of(pickle.dumps(one))
    assert _path_of(pickle.dumps(one)) == here and _path_of(pickle.dumps(two)) == here
    with ProcessPoolExecutor(3, mp_context=get_context("spawn")) as pool:
        there = list(pool.map(_path_of, [pickle.dumps(one)] * 3 + [pickle.dumps(two)] * 2))
    assert all(t == here for t in there)
    # The fixed tie-break: after the straggler's last collective, the lowest rank.
    ranks = here[1]
    changes = [r for i, r in enumerate(ranks) if i == 0 or ranks[i - 1] != r]
    assert changes == [5, 0]
    assert here[2].startswith("rank 5's GPU compute holds every collective of step 551")
