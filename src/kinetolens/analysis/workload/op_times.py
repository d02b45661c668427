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

import numpy as np
import polars as pl

from kinetolens.analysis.forest import depths
from kinetolens.analysis.session import per_trace
from kinetolens.analysis.workload.params import dtypes_expr, shapes_expr
from kinetolens.analysis.workload.work import carried_work, kernel_work
from kinetolens.model.trace import Trace


@per_trace
def op_instances(trace: Trace) -> pl.DataFrame:
    """Every op with its self and total times and work (see the module docstring), in op_id order.

    The figures are summed on a frame of the op ids alone and put beside the
    ops' own columns (a join onto the op table would copy every op column),
    and the totals are summed up the op tree a level at a time (numpy, no
    Python step per op)."""
    ops = trace.ops if trace.ops["op_id"].is_sorted() else trace.ops.sort("op_id")
    child_host = (
        ops.select("parent_id", "dur")  # the columns first: a filter copies each
        .filter(pl.col("parent_id").is_not_null())
        .group_by("parent_id")
        .agg(child_dur=pl.col("dur").sum())
        .rename({"parent_id": "op_id"})
    )
    child_runtime = (
        trace.runtime.select("contained_op_id", "dur")
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
    figures = (
        ops.select("op_id", "dur")
        .join(child_host, on="op_id", how="left", maintain_order="left")
        .join(child_runtime, on="op_id", how="left", maintain_order="left")
        .join(dev_self, on="op_id", how="left", maintain_order="left")
        .join(carried_work(trace).ops.select("op_id", "flops", "bytes"), on="op_id", how="left", maintain_order="left")
        .join(_self_work(trace), on="op_id", how="left", maintain_order="left")
        .select(
            pl.col("device_self").fill_null(0),
            pl.col("kernels").fill_null(0).cast(pl.Int64),
            "flops",
            "bytes",
            "flops_self",
            "bytes_self",
            host_self=pl.col("dur") - pl.col("child_dur").fill_null(0) - pl.col("runtime_dur").fill_null(0),
        )
    )
    up = _parent_rows(ops)
    levels = _bottom_up(up)
    device_total = _subtree_sums(up, levels, figures["device_self"].to_numpy())
    flops_total = _known_subtree_sums(up, levels, figures["flops_self"])
    bytes_total = _known_subtree_sums(up, levels, figures["bytes_self"])
    return ops.hstack(figures).with_columns(
        pl.Series("device_total", device_total, dtype=pl.Int64),
        pl.Series("flops_total", flops_total, dtype=pl.Float64, nan_to_null=True),
        pl.Series("bytes_total", bytes_total, dtype=pl.Float64, nan_to_null=True),
        host_total=pl.col("dur"),
        shapes=shapes_expr(),
        dtypes=dtypes_expr(),
    )


def _parent_rows(ops: pl.DataFrame) -> np.ndarray:
    """Each op's parent's row in ``ops`` (ordered by op_id), its own row at
    the top and where the parent is not in the table."""
    ids = ops["op_id"].to_numpy()
    parent = ops["parent_id"].fill_null(-1).to_numpy()
    own = np.arange(ids.size)
    at = np.minimum(np.searchsorted(ids, parent), max(ids.size - 1, 0))
    found = (parent >= 0) & (ids[at] == parent) if ids.size else parent >= 0
    return np.where(found, at, own)


def _bottom_up(up: np.ndarray) -> list[np.ndarray]:
    """The rows that have a parent, one array per level of the op tree, deepest
    first and each in descending row order: adding each level into its
    parents in this order sums every subtree, each parent taking its children
    from the last one up (the order of a pass from the last op to the first)."""
    level = depths(up)
    rows = np.flatnonzero(level > 0)
    rows = rows[np.lexsort((-rows, -level[rows]))]
    cuts = np.flatnonzero(np.diff(level[rows])) + 1
    return np.split(rows, cuts) if rows.size else []


def _subtree_sums(up: np.ndarray, levels: list[np.ndarray], own: np.ndarray) -> np.ndarray:
    """Each op's ``own`` plus that of every op under it (exact integers);
    ``levels``: :func:`_bottom_up` of ``up``."""
    total = own.astype(np.int64, copy=True)
    for rows in levels:
        np.add.at(total, up[rows], total[rows])
    return total


def _known_subtree_sums(up: np.ndarray, levels: list[np.ndarray], own: pl.Series) -> np.ndarray:
    """:func:`_subtree_sums` of a figure not every op knows: NaN (null) where
    neither the op nor any op under it knows it."""
    known = own.is_not_null().to_numpy()
    total = own.fill_null(0.0).cast(pl.Float64).to_numpy().copy()
    for rows in levels:
        np.add.at(total, up[rows], total[rows])
        np.logical_or.at(known, up[rows], known[rows])
    return np.where(known, total, np.nan)


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
