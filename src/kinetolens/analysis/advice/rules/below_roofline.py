"""Op types that run far below what the GPU allows for their work."""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.advice.rule_context import (
    RuleContext,
)
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.finding import Finding
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.analysis.session import session_of

#: Share of the step an op type must lose against a realistic roofline to be reported.
BELOW_ROOF_SHARE = 0.05
#: At most this many op types are reported by the roofline rule.
BELOW_ROOF_TOP = 3


@rule(requires=("gpu",))
def below_roofline(ctx: RuleContext) -> list[Finding]:
    """Op types that run far below what the GPU allows for their work.

    The saving is the time they lose against a realistic 75% of their
    roofline (min of the precision's peak and intensity x DRAM bandwidth),
    per step: reaching 100% of a roof is not a plan anyone can execute.
    Quiet when the GPU is not in the spec table, since there is no roof.
    """
    from kinetolens.analysis.hardware.roofline import REALISTIC, roofline_by

    spec = gpu_spec(ctx.trace)
    if spec is None or not ctx.step_ms or ctx.trace.kernels.height == 0:
        return []
    from kinetolens.model.earlier_launches import (
        without_earlier_iteration,  # per step: the steps' own work
    )

    own = session_of(ctx.trace).derived(without_earlier_iteration, ctx.trace)
    table = roofline_by(own, spec, "op").with_columns(
        lost_ms=pl.col("lost_75_us") / 1000.0 / ctx.steps
    )
    table = table.filter(pl.col("lost_ms") >= BELOW_ROOF_SHARE * ctx.step_ms).sort(
        "lost_ms", descending=True
    )
    out = []
    for row in table.head(BELOW_ROOF_TOP).iter_rows(named=True):
        memory_bound = row["bound"] == "memory"
        if ctx.kind.pytorch:
            change = (
                "It is memory-bound: fuse it with its neighbours (torch.compile), avoid layout copies "
                "(.contiguous(), dtype casts, channels_last mismatches), keep activations in bf16/fp16"
                if memory_bound
                else "It is compute-bound: run it in bf16/fp16 or TF32 on Tensor Cores, pad M/N/K to multiples "
                "of 8 (64 for best tiles), larger batches, or let torch.compile(mode='max-autotune') pick the kernels"
            )
        else:
            change = (
                "It is memory-bound: fuse it with the kernels before and after it, avoid extra copies and "
                "layout transposes, use narrower data types"
                if memory_bound
                else "It is compute-bound: use Tensor Core math (TF32/FP16/BF16 cuBLAS or cuDNN calls), pad "
                "M/N/K to multiples of 8, give each launch more work"
            )
        out.append(
            Finding(
                rule="below_roofline",
                title=f"{row['op']} runs at {row['pct_of_roof']:.0f}% of its roofline",
                evidence=(
                    f"{row['calls']} calls, {row['device_us'] / 1000.0 / ctx.steps:.2f} ms of GPU time per step, "
                    f"{row['bound']}-bound at {row['intensity']:.1f} FLOP/byte; at {REALISTIC:.0%} of the "
                    f"{spec.name} roof it would take {row['lost_ms']:.2f} ms less per step "
                    f"({row['lost_ms'] / ctx.step_ms:.1%} of the {ctx.step_ms:.2f} ms step)"
                ),
                change=change,
                saving_ms=row["lost_ms"],
                estimate=f"time lost per step against {REALISTIC:.0%} of the op's roofline (kinetolens roofline)",
                where={
                    "op": row["op"],
                    "bound": row["bound"],
                    "pct_of_roof": row["pct_of_roof"],
                },
            )
        )
    return out
