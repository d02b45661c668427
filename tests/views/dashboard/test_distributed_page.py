"""The dashboard's Distributed view on a run folder two runs wrote into:
one trace per rank, each rank's newest, as ``kinetolens
dist`` reads it, not every file counted as one more copy of its rank.  HTA's
NCCL pair (A100s), each rank's trace written twice under tb-profiler names
with two millisecond stamps, served over real HTTP on loopback."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from urllib.parse import urlencode

import polars as pl
import pytest

from kinetolens.views.dashboard import create_app
from tests.conftest import trace_path
from tests.dashboard_helpers import ThreadServer

OLD, NEW = 1_700_000_000_000, 1_700_000_600_000  # two runs, ten minutes apart


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    run = tmp_path_factory.mktemp("twice") / "logdir" / "job"
    run.mkdir(parents=True)
    for rank in (0, 1):
        for stamp in (OLD, NEW):
            src = trace_path(f"hta/trace_filter/sampled_rank-{rank}.json.gz")
            shutil.copy(src, run / f"host_rank{rank}.{stamp}.pt.trace.json.gz")
    srv = ThreadServer(create_app(run.parent))
    yield srv
    srv.stop()


def rows(srv: ThreadServer, source: str) -> pl.DataFrame:
    q = urlencode({"run": "job", "worker": f"host_rank0.{NEW}.pt.trace.json.gz", "ranks": "all",
                   "sort": "rank", "desc": "0", "limit": 50})  # fmt: skip
    status, page, _ = srv.poll(f"/api/table/{source}?{q}", timeout=120)
    assert status == 200, page
    return pl.DataFrame([dict(zip([c["name"] for c in page["columns"]], r, strict=True)) for r in page["rows"]])


def test_distributed_view_reads_one_trace_per_rank(server: ThreadServer) -> None:
    # four files, two ranks, two steps each
    steps = rows(server, "dist_steps")
    assert steps["rank"].to_list() == [0, 1]
    assert steps["steps"].to_list() == [2, 2]
    # each rank's 10 collective calls matched with the other rank's, once
    stragglers = rows(server, "dist_stragglers")
    assert sorted(stragglers["calls"].to_list()) == [10, 10]
