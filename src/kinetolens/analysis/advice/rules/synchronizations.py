"""Host-device synchronizations that drain the GPU's queue, and the idle they cause."""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.advice.rule_context import (
    NS_PER_MS,
    SCALAR_READ_OPS,
    RuleContext,
    top,
)
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.finding import Finding
from kinetolens.registry.words import counted


@rule(requires=("gpu", "aligned_clocks"), finding="synchronization")
def synchronizations(ctx: RuleContext) -> list[Finding]:
    cost = ctx.sync_cost
    if cost.height == 0:
        return []
    idle_ms = float(cost["idle_ns"].sum()) / NS_PER_MS / ctx.steps
    if idle_ms <= 0:
        return []
    per_call = (
        cost.group_by("name")
        .agg(pl.len(), pl.col("idle_ns").sum())
        .sort("idle_ns", descending=True)
    )
    calls = ", ".join(f"{n} x{c}" for n, c, _ in per_call.iter_rows())
    scalar = cost.filter(pl.col("op").is_in(SCALAR_READ_OPS)).height
    source, op = top(cost, "source", "idle_ns"), top(cost, "op", "idle_ns")
    steps = sorted({int(s) for s in cost["step"].drop_nulls().to_list()})
    return [
        Finding(
            rule="synchronization",
            title="Host-device synchronizations drain the GPU queue",
            evidence=(
                f"{counted(cost.height, 'blocking call')} in the profiled steps ({calls}); "
                + (
                    f"{scalar} under aten::item/_local_scalar_dense; "
                    if ctx.kind.pytorch
                    else ""
                )
                + f"the GPU then idled {idle_ms:.2f} ms per step "
                f"until the next launch" + (f"; most of it from {source.removeprefix('in ')}" if source else "")
            ),
            change=(
                "Remove the sync from the hot loop: keep values on the GPU (accumulate losses as tensors, "
                "log every N steps), avoid .item()/.cpu()/print of CUDA tensors and torch.cuda.synchronize(), "
                "use non_blocking=True copies"
                if ctx.kind.pytorch
                else "Remove the blocking calls from the loop: cudaMemcpyAsync from pinned (cudaMallocHost) "
                "memory on a stream instead of cudaMemcpy, and wait on an event (cudaEventRecord / "
                "cudaStreamWaitEvent) only where the host needs the result, not cudaDeviceSynchronize "
                "after every kernel"
            ),
            saving_ms=idle_ms,
            estimate="the GPU idle gap from each sync's return to the next GPU activity, per step",
            where={
                "op": op,
                "source": source,
                "module": top(cost, "module", "idle_ns"),
                "steps": steps,
            },
        )
    ]
