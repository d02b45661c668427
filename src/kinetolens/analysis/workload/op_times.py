"""Host and device time of every op call, self and total.

* host total: the op's own wall time on its thread; host self: minus the
  wall time of the ops and the runtime calls (kernel launches, memcpy,
  syncs) made directly inside it.  Runtime time is reported on its own, as
  torch-tb-profiler does, so host self is the op's own CPU work.
* device self: GPU time (kernels, memcpy, memset) of what this op launched
  directly; device total: of everything launched inside it, at any depth.
* flops / bytes: the work this op carries (:mod:`kinetolens.analysis.workload.work`);
  flops_total / bytes_total: of everything inside it (null where none is known).
"""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.session import per_trace
from kinetolens.analysis.workload.params import dtypes_expr, shapes_expr
from kinetolens.analysis.workload.work import op_work
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
        trace.runtime.filter(pl.col("contained_op_id").is_not_null())
        .group_by("contained_op_id")
        .agg(runtime_dur=pl.col("dur").sum())
        .rename({"contained_op_id": "op_id"})
    )
    dev_self = (
        trace.kernels.filter(pl.col("op_id").is_not_null())
        .group_by("op_id")
        .agg(device_self=pl.col("dur").sum(), kernels=pl.len())
    )
    ops = (
        ops.join(child_host, on="op_id", how="left")
        .join(child_runtime, on="op_id", how="left")
        .join(dev_self, on="op_id", how="left")
        .join(op_work(trace).select("op_id", "flops", "bytes"), on="op_id", how="left")
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
    flops, moved = ops["flops"].to_list(), ops["bytes"].to_list()
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
