"""GPU memory near capacity: no time saving, a risk of out-of-memory errors."""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.advice.rule_context import (
    RuleContext,
)
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.finding import Finding
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.analysis.memory.basis import WINDOW_SUM
from kinetolens.analysis.memory.usage import peak_memory

#: Allocated peak as a share of device memory that counts as near capacity.
MEMORY_NEAR_CAPACITY = 0.9


@rule(requires=("gpu",), training_only=True, finding="memory_near_capacity")
def memory_capacity(ctx: RuleContext) -> list[Finding]:
    if ctx.trace.memory.height == 0:
        return []
    peaks = (
        peak_memory(ctx.trace)
        .filter(pl.col("device").str.starts_with("GPU"))
        .sort("peak_allocated", "device", descending=[True, False])
    )
    capacity = {
        f"GPU{d.get('id')}": d.get("totalGlobalMem")
        for d in ctx.trace.devices
        if d.get("totalGlobalMem")
    }
    spec = gpu_spec(ctx.trace)
    fallback = (
        int(spec.memory_gb * (1 << 30)) if spec is not None and spec.memory_gb else None
    )
    out = []
    for row in peaks.iter_rows(named=True):
        total = capacity.get(row["device"]) or fallback
        if not total or row["peak_allocated"] < MEMORY_NEAR_CAPACITY * total:
            continue
        share = row["peak_allocated"] / total
        out.append(
            Finding(
                rule="memory_near_capacity",
                title=f"{row['device']} memory near capacity",
                evidence=(
                    f"peak allocated {'at least ' if row['basis'] == WINDOW_SUM else ''}"
                    f"{row['peak_allocated'] / (1 << 30):.2f} GiB = {share:.1%} of "
                    f"{total / (1 << 30):.2f} GiB, at {row['peak_op']}"
                    + (f" in {row['peak_module']}" if row["peak_module"] else "")
                ),
                change=(
                    "Leave headroom before scaling up: activation checkpointing, mixed precision, smaller micro-batch "
                    "with gradient accumulation, or free large tensors earlier"
                    if ctx.kind.pytorch
                    else "Leave headroom before scaling up: free or reuse large buffers earlier, or process the "
                    "data in smaller chunks"
                ),
                saving_ms=0.0,
                estimate="no time saving; the risk is out-of-memory errors and allocator cache flushes",
                where={
                    "op": row["peak_op"],
                    "module": row["peak_module"],
                    "device": row["device"],
                },
            )
        )
    return out
