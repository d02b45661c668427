"""Ops as a call tree: each top-level op with the ops it called and their kernels.

A flat op table ranked by self time says *which* op's kernels take the time;
the tree says *why* they ran (``aten::conv2d`` > ``aten::convolution`` > ... >
``aten::cudnn_convolution`` > its kernels).  Calls are merged by their
call path (the names from the top-level op down), so one training step's
thousand convolutions read as one branch.  Annotations
(:func:`kinetolens.analysis.workload.ops.is_annotation`) are left out of the paths (see
:mod:`kinetolens.analysis.workload.annotations`); the ops inside them are
top-level here.
"""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.workload.op_times import op_instances
from kinetolens.analysis.workload.ops import in_steps, is_annotation, share_whole_ns, time_basis
from kinetolens.model.earlier_launches import without_earlier_iteration
from kinetolens.model.trace import Trace

#: Joins the names of a call path (a character no op or kernel name holds).
SEP = "\x1f"


def _paths(inst: pl.DataFrame) -> list[str | None]:
    """Each op call's path, or None for annotations (transparent: their children start a path)."""
    names = inst["name"].to_list()
    parents = inst["parent_id"].to_list()
    skip = inst.select(is_annotation()).to_series().to_list()
    ids = inst["op_id"].to_list()
    at = {op_id: i for i, op_id in enumerate(ids)}
    paths: list[str | None] = [None] * len(names)
    for i in range(len(names)):  # parents come before their children
        p = parents[i]
        up = paths[at[p]] if p is not None and p in at else None
        paths[i] = up if skip[i] else (f"{up}{SEP}{names[i]}" if up else names[i])
    return [None if s else p for p, s in zip(paths, skip)]


def op_tree(trace: Trace, *, step: int | None = None) -> pl.DataFrame:
    """One row per distinct call path (``kind`` ``op``) and per kernel name
    under one (``kind`` ``kernel``), depth-first, heaviest sibling first.

    Columns: ``kind, path, parent, depth, name, calls, device_self_us,
    device_total_us, host_total_us, step_share_pct`` (of the total, of the
    steps' wall time).  Siblings are ordered by device total time (host
    time in a CPU-only trace).
    """
    # ops copied from the next iteration to name the previous one's tail are in no step: each op counts in its own
    trace = without_earlier_iteration(trace)
    inst = op_instances(trace).sort("op_id")
    inst = inst.with_columns(path=pl.Series(_paths(inst), dtype=pl.String))
    if step is not None:
        inst = inst.filter(pl.col("step") == step)
    ops = inst.filter(pl.col("path").is_not_null())
    basis = time_basis(trace)
    stepped = in_steps(trace)  # the share counts what ran in the steps whose wall time it is of
    calls = ops.group_by("path").agg(
        calls=pl.len(),
        device_self_us=pl.col("device_self").sum() / 1000.0,
        device_total_us=pl.col("device_total").sum() / 1000.0,
        host_total_us=pl.col("host_total").sum() / 1000.0,
        _stepped_us=pl.col(basis.removesuffix("_us")).filter(stepped).sum() / 1000.0,
    ).with_columns(kind=pl.lit("op"))
    # a kernel is in its op's step (as its op's device time is), so kernel rows add up to their op's self time
    k = trace.kernels.drop("step")
    launched = k.join(ops.select("op_id", "step", op_path="path"), on="op_id", how="inner")
    kernels = launched.group_by(path=pl.concat_str("op_path", pl.lit(SEP), "name")).agg(
        calls=pl.len(),
        device_self_us=pl.col("dur").sum() / 1000.0,
        device_total_us=pl.col("dur").sum() / 1000.0,
        host_total_us=pl.lit(None, pl.Float64),
        _stepped_us=pl.col("dur").filter(stepped).sum() / 1000.0,
    ).with_columns(kind=pl.lit("kernel"))
    rows = pl.concat([calls, kernels], how="diagonal_relaxed")
    seg = pl.col("path").str.split(SEP)
    step_ns = share_whole_ns(trace, step)
    rows = rows.with_columns(
        parent=pl.when(seg.list.len() > 1).then(seg.list.head(seg.list.len() - 1).list.join(SEP)),
        depth=(seg.list.len() - 1).cast(pl.Int64),
        name=seg.list.last(),
        step_share_pct=pl.col("_stepped_us") * 1000.0 / step_ns * 100.0 if step_ns else pl.lit(None, pl.Float64),
    )
    return _depth_first(rows, basis).select(
        "kind", "path", "parent", "depth", "name", "calls", "device_self_us", "device_total_us", "host_total_us",
        "step_share_pct",
    )


def _depth_first(rows: pl.DataFrame, basis: str) -> pl.DataFrame:
    """Rows in depth-first order, siblings by ``basis`` descending (then name)."""
    children: dict[str | None, list[tuple[float, str, str]]] = {}
    for path, parent, name, value in rows.select("path", "parent", "name", basis).iter_rows():
        children.setdefault(parent, []).append((-(value or 0.0), name, path))
    order: list[str] = []
    stack = [p for _, _, p in sorted(children.get(None, []), reverse=True)]
    while stack:
        path = stack.pop()
        order.append(path)
        stack.extend(p for _, _, p in sorted(children.get(path, []), reverse=True))
    rank = pl.DataFrame({"path": order, "_rank": range(len(order))}, schema={"path": pl.String, "_rank": pl.Int64})
    return rows.join(rank, on="path").sort("_rank").drop("_rank")


def collapse(tree: pl.DataFrame, min_share_pct: float, *, max_depth: int | None = None) -> pl.DataFrame:
    """The rows of :func:`op_tree` worth reading: those at least
    ``min_share_pct`` of the step (whose parents are shown), down to
    ``max_depth``; each shown node's hidden children become one ``kind``
    ``more`` row (``N more``, their summed time)."""
    shown: set[str] = set()
    out: list[dict] = []
    hidden: dict[str, list[dict]] = {}
    for row in tree.iter_rows(named=True):
        parent = row["parent"]
        if parent is not None and parent not in shown:
            continue
        share = row["step_share_pct"]
        deep = max_depth is not None and row["depth"] > max_depth
        if deep or (share is not None and share < min_share_pct):
            if parent is not None:
                hidden.setdefault(parent, []).append(row)
            continue
        shown.add(row["path"])
        out.append(row)
    # Each "more" row goes after its node's last shown descendant.
    final: list[dict] = []
    pending: list[tuple[int, dict]] = []
    for row in out:
        while pending and pending[-1][0] >= row["depth"]:
            final.append(pending.pop()[1])
        final.append(row)
        rest = hidden.get(row["path"])
        if rest:
            more = {
                "kind": "more", "path": row["path"] + SEP + "…", "parent": row["path"], "depth": row["depth"] + 1,
                "name": f"{len(rest)} more", "calls": sum(r["calls"] for r in rest),
                "device_self_us": sum(r["device_self_us"] or 0.0 for r in rest),
                "device_total_us": sum(r["device_total_us"] or 0.0 for r in rest),
                "host_total_us": sum(r["host_total_us"] or 0.0 for r in rest),
                "step_share_pct": sum(r["step_share_pct"] or 0.0 for r in rest) if row["step_share_pct"] is not None else None,
            }  # fmt: skip
            pending.append((row["depth"], more))
    while pending:
        final.append(pending.pop()[1])
    return pl.DataFrame(final, schema=tree.schema) if final else tree.clear()
