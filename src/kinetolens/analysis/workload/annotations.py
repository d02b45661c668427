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
from kinetolens.analysis.workload.ops import STEPS_ROW, in_steps, is_annotation, step_time_ns, time_basis
from kinetolens.model.vocabulary import STEP_PREFIX
from kinetolens.model.trace import Trace


def annotation_stats(trace: Trace, *, step: int | None = None) -> pl.DataFrame:
    """One row per annotation name: ``name, calls, device_self_us,
    device_total_us, host_total_us, step_share_pct`` (of the self time:
    device, or host in a CPU-only trace), by total time.

    A thread's top-level op that runs inside an annotation of another
    thread (autograd's backward thread inside ``## backward ##`` and the
    step) is that annotation's (:func:`_adopters`), so an annotation's total
    holds every annotation and op under it and is at least its children's."""
    inst = op_instances(trace).sort("op_id").with_columns(_ann=is_annotation())
    ids = inst["op_id"].to_list()
    at = {op_id: i for i, op_id in enumerate(ids)}
    parents = inst["parent_id"].to_list()
    adopter = _adopters(inst)
    up = [at.get(p) if p is not None else adopter[i] for i, p in enumerate(parents)]
    ann = inst["_ann"].to_list()
    owner: list[int | None] = [None] * len(ids)
    for i in _parents_first(up):
        p = up[i]
        owner[i] = i if ann[i] else (owner[p] if p is not None else None)
    # each annotation's nearest annotation above it, for the totals
    above = [owner[up[i]] if ann[i] and up[i] is not None else None for i in range(len(ids))]
    inst = inst.with_columns(
        _owner=pl.Series([ids[o] if o is not None else None for o in owner], dtype=pl.Int64),
        _above=pl.Series([ids[a] if a is not None else None for a in above], dtype=pl.Int64),
    )
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
    # Total of an annotation: what it holds and what the annotations under it hold (in the steps or not).
    whole = inst.filter(pl.col("_owner").is_not_null()).group_by("_owner").agg(_all=pl.col("device_self").sum())
    held_all = dict(zip(whole["_owner"].to_list(), whole["_all"].to_list()))
    anns = inst.filter(pl.col("_ann"))
    total = {a: held_all.get(a, 0) for a in anns["op_id"].to_list()}
    chain = dict(zip(anns["op_id"].to_list(), anns["_above"].to_list()))
    for a in sorted(total, key=lambda a: _depth(a, chain), reverse=True):
        if (b := chain[a]) is not None and b in total:
            total[b] += total[a]
    anns = anns.join(held, on="op_id", how="left").with_columns(
        name=pl.when(pl.col("name").str.starts_with(STEP_PREFIX)).then(pl.lit(STEPS_ROW)).otherwise(pl.col("name")),
        device_total=pl.col("op_id").replace_strict(total, return_dtype=pl.Int64),
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


def _adopters(inst: pl.DataFrame) -> list[int | None]:
    """Row of the innermost annotation on another thread of the same
    process whose span holds each thread's top-level row (None elsewhere)."""
    rows = inst.with_row_index("_row").select(pl.col("_row").cast(pl.Int64), "pid", "tid", "ts", "end", "parent_id", "_ann")
    roots = rows.filter(pl.col("parent_id").is_null()).drop("parent_id", "_ann")
    anns = rows.filter(pl.col("_ann")).select("pid", _a_row="_row", _a_tid="tid", _a_ts="ts", _a_end="end")
    out: list[int | None] = [None] * inst.height
    if not roots.height or not anns.height:
        return out
    held = (
        roots.join_where(anns, pl.col("_a_ts") <= pl.col("ts"), pl.col("_a_end") >= pl.col("end"))
        .filter((pl.col("pid") == pl.col("pid_right")) & (pl.col("tid") != pl.col("_a_tid")))
        .sort(["_row", "_a_ts", "_a_end"], descending=[False, True, False])
        .group_by("_row", maintain_order=True)
        .first()
    )
    for row, adopter in zip(held["_row"].to_list(), held["_a_row"].to_list()):
        out[row] = adopter
    return out


def _parents_first(up: list[int | None]) -> list[int]:
    """Row order in which each row's ``up`` row comes before it."""
    done: set[int] = set()
    order: list[int] = []
    for i in range(len(up)):
        path = []
        j: int | None = i
        while j is not None and j not in done and j not in path:
            path.append(j)
            j = up[j]
        for k in reversed(path):
            done.add(k)
            order.append(k)
    return order


def _depth(a: int, chain: dict[int, int | None]) -> int:
    """How many annotations are above annotation ``a``."""
    d, seen = 0, {a}
    while (a := chain.get(a)) is not None and a not in seen:
        seen.add(a)
        d += 1
    return d
