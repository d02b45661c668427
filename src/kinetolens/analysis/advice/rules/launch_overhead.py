"""Many tiny kernels: the launch calls take longer than the kernels run."""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.advice.rule_context import (
    RuleContext,
)
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.finding import Finding
from kinetolens.analysis.gputime.launch import launch_stats, short_kernels
from kinetolens.registry.kernel_names import short_kernel_name

#: Launch-bound kernels per step worth a CUDA graph / fusion.
TINY_KERNELS_PER_STEP = 50


@rule(requires=("gpu", "aligned_clocks"), simulated=("launch:0",))
def launch_overhead(ctx: RuleContext) -> list[Finding]:
    # The allocator_off rule's advice comes first; a step replayed from a graph
    # already launches once (its few eager kernels are no case for a graph).
    if ctx.allocator_calls is not None or ctx.graph_replayed is not None:
        return []
    stats = ctx.trace.kernels.height and launch_stats(ctx.trace)
    if not isinstance(stats, pl.DataFrame) or stats.height == 0:
        return []
    short = short_kernels(stats.filter(pl.col("kind") == "kernel"))
    count = int(short["count"].sum()) if short.height else 0
    if count / ctx.steps < TINY_KERNELS_PER_STEP:
        return []
    cpu_us, gpu_us = float(short["cpu_us"].sum()), float(short["gpu_us"].sum())
    saving = max(cpu_us - gpu_us, 0.0) / 1000.0 / ctx.steps
    top = short.row(0, named=True)
    return [
        Finding(
            rule="launch_overhead",
            title="Many tiny kernels: launch-bound",
            evidence=(
                f"{count / ctx.steps:.0f} kernels per step run shorter than their launch call "
                f"({gpu_us / count:.1f} us on the GPU vs {cpu_us / count:.1f} us to launch on average); "
                f"most launch time: {short_kernel_name(top['name'])} x{top['count']}"
            ),
            change=(
                "Fuse elementwise chains (torch.compile), use fused/foreach optimizers "
                "(foreach=True or fused=True), capture the step in a CUDA graph"
                if ctx.kind.pytorch
                else "Fuse small kernels into fewer larger ones (one kernel per loop body, not per array "
                "operation), or capture the launch sequence in a CUDA graph (cudaGraphLaunch)"
            ),
            saving_ms=saving,
            estimate="launch time minus kernel time of the launch-bound kernels, per step",
            where={"kernel": top["name"]},
        )
    ]
