"""The per-kernel table (PyProf's report): one row per GPU activity."""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.hardware.kernel_columns import KERNEL_COLUMNS
from kinetolens.analysis.hardware.tensor_cores import kernel_tensor_cores
from kinetolens.analysis.workload.fusions import fused_op_names
from kinetolens.analysis.workload.params import dtypes_expr, shapes_expr
from kinetolens.analysis.workload.work import kernel_work
from kinetolens.model.ownership import owned_kernels
from kinetolens.model.trace import Trace
from kinetolens.registry.kernel_names import short_names


def _dims(prefix: str) -> pl.Expr:
    parts = [pl.col(f"{prefix}_{a}").cast(pl.String) for a in "xyz"]
    return pl.when(pl.col(f"{prefix}_x").is_not_null()).then(
        pl.concat_str([pl.lit("("), parts[0], pl.lit(","), parts[1], pl.lit(","), parts[2], pl.lit(")")])
    )


def kernel_table(
    trace: Trace, step: int | None = None, own: tuple[int, int] | None = None, first_ts: int | None = None
) -> pl.DataFrame:
    """PyProf-style rows for every kernel (optionally one step only).

    A part of a trace read a step window at a time passes ``own`` (its rows
    are the kernels it owns, :func:`owned_kernels`) and ``first_ts``, the
    whole trace's first kernel start (``start_us`` counts from it)."""
    k = trace.kernels
    if step is not None:
        k = k.filter(pl.col("step") == step)
    if own is not None:
        k = k.filter(owned_kernels(*own))
    ops = trace.ops.select("op_id", "input_dims", "input_types")
    # Backward kernels take the forward op's shapes, as PyProf did.
    k = (
        k.with_columns(param_op=pl.coalesce("fwd_op_id", "op_id"))
        .join(ops, left_on="param_op", right_on="op_id", how="left")
    )
    k = k.join(kernel_tensor_cores(trace).select("kernel_id", "tc"), on="kernel_id", how="left")
    # renamed: the kernels table's own ``bytes`` is what a memcpy/memset moved
    work = kernel_work(trace).select("kernel_id", "flops", work_bytes=pl.col("bytes"))
    k = k.join(work, on="kernel_id", how="left")
    first = first_ts if first_ts is not None else trace.kernels["ts"].min() if trace.kernels.height else 0
    shapes = shapes_expr()
    dtypes = dtypes_expr()
    table = k.select(
        idx=pl.col("kernel_id"),
        step=pl.col("step"),
        dir=pl.col("direction").cast(pl.String),
        module=pl.col("module"),
        op=pl.col("op"),
        top_op=pl.col("top_op"),
        fwd_op=pl.col("fwd_op"),
        sub=pl.col("sub"),
        kernel=pl.col("name"),
        kind=pl.col("kind").cast(pl.String),
        params=pl.concat_str([shapes, dtypes], separator=" ", ignore_nulls=True),
        dur_us=pl.col("dur") / 1000.0,
        tc=pl.col("tc"),
        flops=pl.col("flops"),
        bytes=pl.col("work_bytes"),
        tflops_s=pl.when(pl.col("dur") > 0).then(pl.col("flops") / pl.col("dur") / 1e3),
        gbps=pl.when(pl.col("dur") > 0).then(pl.col("work_bytes") / pl.col("dur")),
        device=pl.col("device"),
        stream=pl.col("stream"),
        grid=_dims("grid"),
        block=_dims("block"),
        regs=pl.col("registers_per_thread"),
        smem=pl.col("shared_memory"),
        occupancy=pl.col("occupancy"),
        blocks_per_sm=pl.col("blocks_per_sm"),
        source=pl.col("source"),
        launch=pl.col("launch"),
        graph=pl.format("{}:{}", "graph_id", "graph_node"),
        start_us=(pl.col("ts") - first) / 1000.0,
    )
    # once per distinct name, not per row: a trace has ~100 names over ~100k kernels
    table = table.with_columns(short_name=short_names(table["kernel"]), fused_ops=fused_op_names(trace, table["kernel"]))
    order = list(KERNEL_COLUMNS)
    return table.select(sorted(table.columns, key=order.index)).sort("idx")


def kernel_verdicts(trace: Trace, own: tuple[int, int] | None = None) -> pl.DataFrame:
    """``tc, dur_us`` of every kernel: the two columns of :func:`kernel_table`
    that the Tensor Core split (:func:`tensor_core_time`) reads, for a view
    that shows the split without the table (the report: the table is a row
    of text per kernel, 120 MB on a 500 MB trace); ``own``: of the kernels
    launched in [lo, hi) ns alone (:func:`owned_kernels`)."""
    kernels = trace.kernels if own is None else trace.kernels.filter(owned_kernels(*own))
    k = kernels.select("kernel_id", dur_us=pl.col("dur") / 1000.0)
    tc = kernel_tensor_cores(trace).select("kernel_id", "tc")
    return k.join(tc, on="kernel_id", how="left", maintain_order="left").select("tc", "dur_us")


def tensor_core_time(table: pl.DataFrame) -> pl.DataFrame:
    """GPU time per Tensor Core verdict of a :func:`kernel_table` (or of
    :func:`kernel_verdicts`): ``tc, us``.

    ``tc`` is yes / no / unknown (a kernel without a verdict counts as
    unknown); verdicts with no time are left out.  The chart, the markdown
    report and the dashboard all show this one split.
    """
    return (
        table.group_by(pl.col("tc").fill_null("unknown"))
        .agg(us=pl.col("dur_us").sum())
        .filter(pl.col("us") > 0)
        .sort("tc")
    )
