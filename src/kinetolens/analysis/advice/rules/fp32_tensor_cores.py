"""Matrix math in fp32 on CUDA cores where Tensor Cores could run it.

Its what-if (and that of :mod:`.misaligned_shapes`) makes the kernels of
the ops it names :data:`TC_SPEEDUP` times faster."""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.advice.rule_context import (
    RuleContext,
    top,
)
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.finding import Finding
from kinetolens.analysis.hardware.gpu_spec import trace_device
from kinetolens.analysis.hardware.tensor_cores import _capability, matrix_roots
from kinetolens.model.trace import Trace

#: Tensor-Core-eligible fp32 kernel time as a share of all kernel time to report.
FP32_TC_SHARE = 0.1
#: Assumed speed-up of matrix kernels moved from fp32 CUDA cores to Tensor
#: Cores; real gains are 2-8x (TF32/fp16 peaks vs fp32), 2x keeps it conservative.
TC_SPEEDUP = 2.0


@rule(requires=("gpu", "pytorch"))
def fp32_tensor_cores(ctx: RuleContext) -> list[Finding]:
    ops = ctx.tensor_core_ops
    kernel_ns = float(
        ctx.trace.kernels.select(pl.col("dur").filter(pl.col("kind") == "kernel").sum()).item() or 0
    )
    if ops.height == 0 or not kernel_ns:
        return []
    fp32 = ops.filter((pl.col("dtype") == "fp32") & (pl.col("tc") != "yes"))
    time_us = float(fp32["kernel_time_us"].sum()) + _backward_kernel_us(
        ctx.trace, fp32["op_id"]
    )
    share = time_us * 1000.0 / kernel_ns
    if share < FP32_TC_SHARE:
        return []
    cc = _capability(trace_device(ctx.trace))
    tf32 = cc is not None and cc >= (8, 0)
    top_op = top(fp32, "op", "kernel_time_us")
    simulate_kernels(
        ctx,
        "fp32_tensor_cores",
        fp32["op_id"],
        backward=True,
        what="fp32 matmul/conv kernels",
    )
    return [
        Finding(
            rule="fp32_tensor_cores",
            title="Matrix math runs in fp32 without Tensor Cores",
            evidence=(
                f"{share:.1%} of kernel time ({time_us / 1000.0 / ctx.steps:.2f} ms per step) is fp32 matmul/conv "
                f"(forward and backward) on non-Tensor-Core kernels, {fp32.height} op calls; most in {top_op}"
            ),
            change=(
                "Use automatic mixed precision (torch.autocast(device_type='cuda', dtype=torch.bfloat16 or "
                "float16) with GradScaler for fp16)"
                + (
                    "; or at least torch.backends.cuda.matmul.allow_tf32 = True / set_float32_matmul_precision('high')"
                    if tf32
                    else ""
                )
            ),
            saving_ms=time_us / 1000.0 / ctx.steps * (1.0 - 1.0 / TC_SPEEDUP),
            estimate=f"those kernels' time per step, assuming only a {TC_SPEEDUP:g}x Tensor Core speed-up",
            where={"op": top_op},
        )
    ]


def simulate_kernels(
    ctx: RuleContext, rule: str, roots: pl.Series, backward: bool, what: str
) -> None:
    """Register the what-if of ``rule``: the kernels of the matrix ops ``roots``
    (and of their backward) :data:`TC_SPEEDUP` times faster."""
    from kinetolens.analysis.paths.whatif import Change

    ops = ctx.trace.ops.select("op_id").with_columns(
        matrix_roots(ctx.trace.ops.select("op_id", "name", "parent_id"))
    )
    k = ctx.trace.kernels.lazy().filter(pl.col("kind") == "kernel").select(
        "kernel_id", "op_id", "fwd_op_id"
    ).collect()  # lazy: the three columns are filtered, not the whole table
    mine = roots.implode()
    fwd = k.join(ops, on="op_id", how="inner").filter(pl.col("root").is_in(mine))[
        "kernel_id"
    ]
    ids = fwd.to_list()
    if backward:
        bwd = k.filter(pl.col("fwd_op_id").is_not_null()).join(
            ops, left_on="fwd_op_id", right_on="op_id", how="inner"
        )
        ids += bwd.filter(pl.col("root").is_in(mine))["kernel_id"].to_list()
    factor = 1.0 / TC_SPEEDUP
    ctx.changes[rule] = [
        Change(
            "kernel_ids",
            what,
            factor,
            f"{what}={factor:g}",
            ids=tuple(sorted(set(ids))),
        )
    ]


def _backward_kernel_us(trace: Trace, forward_ops: pl.Series) -> float:
    """Kernel time of the backward of ``forward_ops`` (matrix-op roots):
    the gradient convolutions/matmuls run at the forward's precision too."""
    if forward_ops.len() == 0:
        return 0.0
    roots = trace.ops.select("op_id").with_columns(
        matrix_roots(trace.ops.select("op_id", "name", "parent_id"))
    )
    k = trace.kernels.lazy().filter(
        (pl.col("kind") == "kernel") & pl.col("fwd_op_id").is_not_null()
    ).select("op_id", "fwd_op_id", "dur").collect()  # lazy: three columns filtered, not the whole table
    k = k.join(roots.rename({"root": "own_root"}), on="op_id", how="left")
    k = k.join(roots, left_on="fwd_op_id", right_on="op_id", how="inner")
    # A backward matrix op that is itself one of ``forward_ops`` (convolution_backward) is counted already.
    mine = forward_ops.implode()
    return float(k.filter(pl.col("root").is_in(mine) & ~pl.col("own_root").is_in(mine).fill_null(False))["dur"].sum() or 0) / 1000.0
