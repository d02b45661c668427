"""Stream waits inferred from ``cudaStreamWaitEvent`` calls in traces without
``cuda_sync`` records (PARAM's DLRM, 8 ranks): the trace names neither the
event nor the streams, and has no ``cudaEventRecord`` calls.  Rank 1's first
CatArrayBatchedCopy after the all-to-all was launched at ~2.6 ms and ran at
~9.6 ms, right after the SendRecv kernel on the NCCL stream ended: that wait
is GPU -> GPU synchronization, not launch overhead."""

from __future__ import annotations

import polars as pl
import pytest

from kinetolens import load
from kinetolens.analysis.paths.critical_path import critical_path, step_window
from kinetolens.analysis.paths.dependency_graph import build_graph
from kinetolens.runs.graphs import run_graphs, run_paths
from tests.conftest import trace_path

RUN = "param/dlrm_kineto"
RANK1 = f"{RUN}/worker1_step_12.1694128201556.pt.trace.json.gz"


@pytest.fixture(scope="module")
def rank1():
    return load(trace_path(RANK1))


def test_wait_after_all_to_all_is_a_sync_edge_from_the_sendrecv(rank1) -> None:
    w = step_window(rank1, 10)
    g = build_graph(rank1, w.start, w.end)
    ev = g.events
    send = ev.filter(pl.col("name").str.starts_with("ncclKernel_SendRecv")).sort("ts").row(0, named=True)
    cat = ev.filter(pl.col("name").str.contains("CatArrayBatchedCopy")).sort("ts").row(0, named=True)
    assert cat["ts"] >= send["end"]  # it ran after the SendRecv, ~7 ms after its launch
    e = g.edges
    assert e.filter((pl.col("src") == 2 * send["eid"] + 1) & (pl.col("dst") == 2 * cat["eid"]) & (pl.col("type") == "sync")).height == 1
    launch = e.filter((pl.col("dst") == 2 * cat["eid"]) & (pl.col("type") == "launch"))
    assert launch["weight"].to_list() == [0]  # was ~6,984 us
    # A wait the next kernel did not honour (it ran while the SendRecv still ran) is no edge.
    during = ev.filter((pl.col("side") == "gpu") & (pl.col("ts") > send["ts"]) & (pl.col("ts") < send["end"]))["eid"]
    assert during.len() > 0
    assert e.filter((pl.col("src") == 2 * send["eid"] + 1) & pl.col("dst").is_in((2 * during).implode())).height == 0


def test_single_rank_path_is_bound_by_communication(rank1) -> None:
    cp = critical_path(rank1, step_window(rank1, 10))
    share = dict(zip(cp.summary["bound_by"], cp.summary["us"], strict=True))
    # After: communication ~9,582 us (58%), launch overhead ~116 us; the CatArrayBatchedCopy waits on no launch.
    assert share["communication"] > 0.5 * cp.length_us
    assert share.get("launch_overhead", 0.0) < 200
    # The path leaves the SendRecv kernel by the stream wait into the CatArrayBatchedCopy on the compute
    # stream (before: into the host's cudaStreamSynchronize, as if the copy had waited for its launch).
    p = cp.path.with_row_index("i")
    at = p.filter(pl.col("name").str.starts_with("ncclKernel_SendRecv") & (pl.col("bound_by") == "communication"))["i"][0]
    after = p.slice(at + 1, 2)
    assert after["bound_by"].to_list() == ["sync_wait", "gpu_compute"]
    assert "CatArrayBatchedCopy" in after["name"][1]


def test_cross_rank_path_has_no_launch_edge_holding_the_collective_wait() -> None:
    (cp,) = run_paths(run_graphs(trace_path(RUN), "local:1", cache=False), 10)
    share = dict(zip(cp.summary["bound_by"], cp.summary["us"], strict=True))
    # Before: launch overhead 7,927 us (50.7%), rank 1's CatArrayBatchedCopy alone 6,984 us.
    # After: length ~9,164 us over ranks 3 and 4, CPU ops ~7,655 us (83.5%), data loading ~1,398 us,
    # launch overhead ~94 us (1.0%), communication ~8 us (the all-to-all's shortest transfer).
    assert share["launch_overhead"] < 0.05 * cp.length_us
    onpath = cp.path.filter(pl.col("name").str.contains("CatArrayBatchedCopy") & (pl.col("bound_by") == "launch_overhead"))
    assert onpath["us"].sum() < 50
