"""PyTorch's caching allocator is off: every tensor is a device malloc and a free."""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.advice.rule_context import NS_PER_MS, RuleContext
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.finding import Finding


@rule(requires=("gpu", "pytorch"))
def allocator_off(ctx: RuleContext) -> list[Finding]:
    calls = ctx.allocator_calls
    if calls is None:
        return []
    ms = float(calls["dur"].sum()) / NS_PER_MS / ctx.steps
    per_call = calls.group_by("name").agg(pl.len(), pl.col("dur").sum()).sort("dur", descending=True)
    listed = ", ".join(f"{n} x{c} ({d / NS_PER_MS:,.2f} ms)" for n, c, d in per_call.iter_rows())
    env = "PYTORCH_NO_HIP_MEMORY_CACHING" if calls["name"].str.starts_with("hip").any() else "PYTORCH_NO_CUDA_MEMORY_CACHING"
    return [
        Finding(
            rule="allocator_off",
            title="The caching allocator is off: every tensor is a device malloc and free",
            evidence=(
                f"{calls.height / ctx.steps:,.0f} device allocation calls per step ({listed}), "
                f"{ms:.2f} ms per step ({ms / ctx.step_ms:.1%} of the {ctx.step_ms:.2f} ms step); "
                "with PyTorch's caching allocator they happen once per block, not per tensor"
            ),
            change=(
                f"Turn the caching allocator back on: unset {env} (=1 disables it); each free "
                "synchronizes the device, so torch.compile or CUDA graphs cannot help until then"
            ),
            saving_ms=min(ms, ctx.step_ms),
            estimate="time in the device malloc/free calls per step",
            where={"call": per_call["name"][0]},
        )
    ]
