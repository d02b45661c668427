"""Annotations: ``ProfilerStep#N``, ``record_function`` ranges, ``nccl:*`` ranges
(:func:`kinetolens.analysis.workload.ops.is_annotation`).

They mark spans of the program, not work of their own, so they are a table
of their own rather than rows among the ops (where a step range would take
the whole step and push the shares past 100%).  An annotation's *total*
device time is that of everything launched inside it; its *self* time
leaves out what a nested annotation holds, so each microsecond of GPU time
is in at most one row's self time and the self shares sum to at most 100%.
The steps' ranges read as one row, ``ProfilerStep#*``.
"""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.workload.op_times import op_instances
from kinetolens.analysis.workload.ops import in_steps, is_annotation, step_time_ns, time_basis
from kinetolens.model.vocabulary import STEP_PREFIX
from kinetolens.model.trace import Trace

#: The row the ``ProfilerStep#N`` ranges are merged into.
STEPS_ROW = f"{STEP_PREFIX}*"


def annotation_stats(trace: Trace, *, step: int | None = None) -> pl.DataFrame:
    """One row per annotation name: ``name, calls, device_self_us,
    device_total_us, host_total_us, step_share_pct`` (of the self time:
    device, or host in a CPU-only trace), by total time."""
    inst = op_instances(trace).sort("op_id").with_columns(_ann=is_annotation())
    ids = inst["op_id"].to_list()
    at = {op_id: i for i, op_id in enumerate(ids)}
    parents = inst["parent_id"].to_list()
    ann = inst["_ann"].to_list()
    owner: list[int | None] = [None] * len(ids)
    for i in range(len(ids)):  # parents come before their children
        p = parents[i]
        owner[i] = ids[i] if ann[i] else (owner[at[p]] if p is not None and p in at else None)
    inst = inst.with_columns(_owner=pl.Series(owner, dtype=pl.Int64))
    if step is not None:
        inst = inst.filter(pl.col("step") == step)
    device = time_basis(trace) == "device_total_us"
    own_col = "device_self" if device else "host_self"
    # Self time of an annotation: the own time of every op whose nearest annotation it is.
    held = (
        inst.filter(pl.col("_owner").is_not_null() & in_steps(trace))
        .group_by("_owner")
        .agg(_held=pl.col(own_col).sum(), _held_device=pl.col("device_self").sum())
        .rename({"_owner": "op_id"})
    )
    anns = inst.filter(pl.col("_ann")).join(held, on="op_id", how="left").with_columns(
        name=pl.when(pl.col("name").str.starts_with(STEP_PREFIX)).then(pl.lit(STEPS_ROW)).otherwise(pl.col("name"))
    )
    step_ns = step_time_ns(trace, step)
    out = anns.group_by("name").agg(
        calls=pl.len(),
        device_self_us=pl.col("_held_device").fill_null(0).sum() / 1000.0,
        device_total_us=pl.col("device_total").sum() / 1000.0,
        host_total_us=pl.col("host_total").sum() / 1000.0,
        _share_ns=pl.col("_held").fill_null(0).sum(),
    )
    share = pl.col("_share_ns") / step_ns * 100.0 if step_ns else pl.lit(None, pl.Float64)
    order = "device_total_us" if device else "host_total_us"
    return out.with_columns(step_share_pct=share).drop("_share_ns").sort([order, "name"], descending=[True, False])
