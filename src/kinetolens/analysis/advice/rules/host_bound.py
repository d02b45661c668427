"""Low GPU utilization: the GPU waits for host work beyond data loading and syncs."""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.advice.rule_context import (
    NS_PER_MS,
    RuleContext,
)
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.finding import Finding
from kinetolens.analysis.gputime.idle import idle_gaps

#: GPU utilization below which host-bound gaps are reported.
LOW_UTILIZATION = 0.8
#: Host-wait idle (not already explained) as a share of step time to report.
HOST_WAIT_SHARE = 0.05


@rule(
    requires=("gpu", "aligned_clocks"),
    simulated=("category:data_loading=0", "category:cpu=0"),
    simulated_from=("category:data_loading=0",),
)
def host_bound(ctx: RuleContext) -> list[Finding]:
    if ctx.allocator_calls is not None:  # the allocator_off rule's advice comes first
        return []
    util = ctx.gpu_metrics
    if util.height == 0 or not ctx.step_ms:
        return []
    utilization = float(util["utilization"].drop_nulls().max() or 0.0)
    if utilization >= LOW_UTILIZATION:
        return []
    gaps = ctx.in_steps(
        idle_gaps(ctx.trace).filter(pl.col("idle_category") == "host_wait")
    )
    if gaps.height == 0:
        return []
    # Side streams (NCCL, copies) wait for the host while the compute stream
    # runs, so take the stream with the most host-wait, and cap it by the
    # step time no GPU work ran at all (the overview's non-GPU categories).
    per_stream = (
        gaps.group_by("stream")
        .agg(pl.col("gap_ns").sum())
        .sort("gap_ns", descending=True)
    )
    wait_ms = float(per_stream["gap_ns"][0]) / NS_PER_MS / ctx.steps
    avg = ctx.average_ns
    gpu_idle_ms = (
        sum(avg.get(c, 0.0) for c in ("runtime", "cpu_exec", "other")) / NS_PER_MS
    )
    sync_ms = (
        float(ctx.sync_cost["idle_ns"].sum()) / NS_PER_MS / ctx.steps
        if ctx.sync_cost.height
        else 0.0
    )
    # DataLoader time is outside gpu_idle_ms already (its own category).
    rest = max(min(wait_ms, gpu_idle_ms) - sync_ms, 0.0)
    if rest / ctx.step_ms < HOST_WAIT_SHARE:
        return []
    # A served model has no DataLoader: its words name only what it has.
    explained = "syncs" if ctx.kind.inference else "data loading or syncs"
    outside = "" if ctx.kind.inference else " outside the DataLoader"
    return [
        Finding(
            rule="host_bound",
            title="Low GPU utilization: the GPU waits for the host",
            evidence=(
                f"GPU utilization {utilization:.1%}; streams idled {wait_ms:.2f} ms per step waiting for a launch "
                f"that had not started, {rest:.2f} ms of it not explained by {explained} "
                f"({rest / ctx.step_ms:.1%} of the {ctx.step_ms:.2f} ms step)"
            ),
            change=(
                _already_graphed(ctx.graph_replayed)
                if ctx.graph_replayed is not None
                else "Cut host overhead per step: torch.compile (fuses ops, fewer launches), CUDA graphs "
                "(torch.cuda.graphs / mode='reduce-overhead'), or a larger batch so each launch does more work"
                if ctx.kind.pytorch
                else "Cut host work between launches: capture the repeated launch sequence in a CUDA graph "
                "(cudaStreamBeginCapture / cudaGraphLaunch), fuse small kernels, give each launch more work, "
                "and keep host-side computation and copies off the GPU's critical path"
            ),
            saving_ms=rest,
            estimate=(
                "host-wait idle per step on the stream that waits most, capped by the step time with no GPU "
                f"work{outside}, minus the GPU idle the synchronization finding claims"
            ),
            where={"graph_replayed": True} if ctx.graph_replayed is not None else {},
        )
    ]


def _already_graphed(replayed: tuple[int, int, str]) -> str:
    """The change for a step whose kernels already run from a graph: the host gap is outside it."""
    graphed, kernels, call = replayed
    return (
        f"The step already replays a graph ({call} runs {graphed:,} of its {kernels:,} kernels): the GPU "
        "waits on host work between replays, not on launches; overlap that work (scheduling, input "
        "preparation, sampling) with the GPU (asynchronous scheduling where the engine offers it), or do "
        "more work per replay (a larger batch)"
    )
