"""The cross-rank path's "slowest rank's step" is the step time `dist` reports:
one step window definition (the model's, kinetolens.model.steps) for both."""

from __future__ import annotations

import pytest

import kinetolens
from kinetolens.analysis.ranks.distributed import rank_summary, step_times
from kinetolens.runs.graphs import run_graphs, run_paths
from tests.conftest import trace_path

DLRM = "param/dlrm_kineto"


def test_slowest_step_is_dist_max_step_time() -> None:
    run = trace_path(DLRM)
    paths = run_paths(run_graphs(run, "local:1", cache=False))
    assert len(paths) == 1
    summaries = [rank_summary(kinetolens.load(p, cache=False)) for p in sorted(run.glob("*.json.gz"))]
    dist_max_ms = float(step_times(summaries)["max_step_ms"].max())
    assert dist_max_ms == pytest.approx(18.71, abs=0.01)
    # the host range of rank 1's ProfilerStep#10 is 19.90 ms; its step (its own work's window) 18.58 ms
    assert paths[0].slowest_step_us / 1000 == pytest.approx(dist_max_ms, abs=1e-6)
