"""Host and device time of every op call, self and total.

* host total: the op's own wall time on its thread; host self: minus the
  wall time of the ops and the runtime calls (kernel launches, memcpy,
  syncs) made directly inside it.  Runtime time is reported on its own, as
  torch-tb-profiler does, so host self is the op's own CPU work.
* device self: GPU time (kernels, memcpy, memset) of what this op launched
  directly; device total: of everything launched inside it, at any depth.
* flops / bytes: the work this op carries (:mod:`kinetolens.analysis.workload.work`).
* flops_self / bytes_self: the work of the kernels this op launched directly
  (their shares of their carrier's work, :func:`kernel_work`), so a row's self
  time and self work cover the same kernels: ``aten::fill_`` under
  ``aten::zero_`` has the bytes of its own kernels, not ``zero_``.  Work that
  reached no kernel (a CPU-only trace) stays on the op carrying it.
  flops_total / bytes_total: the self work of everything inside it (null where none is known).
"""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.session import per_trace
from kinetolens.analysis.workload.params import dtypes_expr, shapes_expr
from kinetolens.analysis.workload.work import carried_work, kernel_work
from kinetolens.model.trace import Trace


@per_trace
def op_instances(trace: Trace) -> pl.DataFrame:
    ops = trace.ops
    n = ops.height
    child_host = (
        ops.filter(pl.col("parent_id").is_not_null())
        .group_by("parent_id")
        .agg(child_dur=pl.col("dur").sum())
        .rename({"parent_id": "op_id"})
    )
    child_runtime = (
        trace.runtime.select("contained_op_id", "dur")  # the columns first: a filter copies each
        .filter(pl.col("contained_op_id").is_not_null())
        .group_by("contained_op_id")
        .agg(runtime_dur=pl.col("dur").sum())
        .rename({"contained_op_id": "op_id"})
    )
    dev_self = (
        trace.kernels.select("op_id", "dur")
        .filter(pl.col("op_id").is_not_null())
        .group_by("op_id")
        .agg(device_self=pl.col("dur").sum(), kernels=pl.len())
    )
    ops = (
        ops.join(child_host, on="op_id", how="left")
        .join(child_runtime, on="op_id", how="left")
        .join(dev_self, on="op_id", how="left")
        .join(carried_work(trace).ops.select("op_id", "flops", "bytes"), on="op_id", how="left")
        .join(_self_work(trace), on="op_id", how="left")
        .with_columns(
            pl.col("device_self").fill_null(0),
            pl.col("kernels").fill_null(0).cast(pl.Int64),
            host_self=pl.col("dur") - pl.col("child_dur").fill_null(0) - pl.col("runtime_dur").fill_null(0),
        )
        .sort("op_id")
    )
    # Children have larger op_ids than their parents: sum bottom-up.
    total = ops["device_self"].to_list()
    parents = ops["parent_id"].to_list()
    flops, moved = ops["flops_self"].to_list(), ops["bytes_self"].to_list()
    for i in range(n - 1, -1, -1):
        p = parents[i]
        if p is not None:
            total[p] += total[i]
            if flops[i] is not None:
                flops[p] = flops[i] + (flops[p] or 0.0)
            if moved[i] is not None:
                moved[p] = moved[i] + (moved[p] or 0.0)
    return ops.with_columns(
        pl.Series("device_total", total, dtype=pl.Int64),
        pl.Series("flops_total", flops, dtype=pl.Float64),
        pl.Series("bytes_total", moved, dtype=pl.Float64),
        host_total=pl.col("dur"),
        shapes=shapes_expr(),
        dtypes=dtypes_expr(),
    ).drop("child_dur", "runtime_dur")


def _self_work(trace: Trace) -> pl.DataFrame:
    """Per op: ``flops_self, bytes_self``, the work of the kernels it launched
    directly, and, for an op carrying work none of its kernels took, that work."""
    carried = carried_work(trace)
    launched = (
        kernel_work(trace)
        .join(trace.kernels.select("kernel_id", "op_id"), on="kernel_id", how="inner")
        .group_by("op_id")
        .agg(
            flops_self=pl.when(pl.col("flops").is_not_null().any()).then(pl.col("flops").sum()),
            bytes_self=pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()),
        )
    )
    unbooked = carried.ops.filter(~pl.col("op_id").is_in(carried.kernels["carrier"].unique().implode())).select(
        "op_id", flops_self="flops", bytes_self="bytes"
    )
    return pl.concat([launched, unbooked.cast(launched.schema)]).group_by("op_id").agg(
        pl.col("flops_self").drop_nulls().first(), pl.col("bytes_self").drop_nulls().first()
    )
