"""Half-precision matrix shapes not divisible by 8: no Tensor Cores for them."""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.advice.rule_context import (
    RuleContext,
)
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.advice.rules.fp32_tensor_cores import (
    TC_SPEEDUP,
    simulate_kernels,
)
from kinetolens.analysis.finding import Finding


@rule(requires=("gpu", "pytorch"))
def misaligned_shapes(ctx: RuleContext) -> list[Finding]:
    ops = ctx.tensor_core_ops
    if ops.height == 0:
        return []
    bad = ops.filter(
        (pl.col("shapes_ok") == False)
        & pl.col("dtype").is_in(["fp16", "bf16"])
        & (pl.col("tc") != "yes")
    )
    if bad.height == 0:
        return []
    time_us = float(bad["kernel_time_us"].sum())
    top = bad.sort("kernel_time_us", descending=True).row(0, named=True)
    simulate_kernels(
        ctx,
        "misaligned_shapes",
        bad["op_id"],
        backward=False,
        what="misaligned half-precision matmul/conv kernels",
    )
    return [
        Finding(
            rule="misaligned_shapes",
            title="Half-precision matrix shapes not divisible by 8",
            evidence=(
                f"{bad.height} fp16/bf16 matmul/conv calls with {top['misaligned']} "
                f"(e.g. {top['op']} {top['dims']}) ran without Tensor Cores: {time_us / 1000.0 / ctx.steps:.2f} ms "
                "per step"
            ),
            change="Pad hidden sizes, vocabulary and channel counts (and the batch) to multiples of 8 (16 for int8/fp8)",
            saving_ms=time_us / 1000.0 / ctx.steps * (1.0 - 1.0 / TC_SPEEDUP),
            estimate=f"those kernels' time per step, assuming a {TC_SPEEDUP:g}x speed-up once on Tensor Cores",
            where={"op": top["op"], "dims": top["dims"]},
        )
    ]
