"""FLOPs and minimum bytes of every op call and every kernel.

Where the work is counted (so nothing is counted twice through nesting):

* An op *carries* work when the registry (:mod:`kinetolens.registry.flops`)
  has a formula for it that fits its recorded arguments, no op above it
  already carries work, and, for a composite op (``aten::linear``,
  ``aten::conv2d``, ``aten::scaled_dot_product_attention``, ``aten::to`` ...),
  no op below it has a formula of a family it defers to.  So
  ``aten::linear -> aten::addmm`` counts at ``addmm``;
  ``aten::convolution -> aten::cudnn_convolution`` at ``cudnn_convolution``
  (and the bias ``aten::add_`` beside it on its own); a non-composite op
  such as ``aten::cudnn_convolution`` or ``aten::native_layer_norm`` covers
  everything it calls.
* Backward: autograd nodes (``MmBackward0``, ``ConvolutionBackward0``) have no
  formula; the aten ops they run (``aten::mm``, ``aten::convolution_backward``,
  ``aten::_flash_attention_backward``) carry the work from their own shapes.
  Formulas that need a shape the backward call did not record (older cuDNN
  ``*_backward_input``/``_weight``) take it from the forward op (``fwd_op_id``).
* A kernel gets the work of the op carrying its launching op (that op or an
  ancestor).  Memcpy and memset do no FLOPs; when the op launched exactly one
  compute kernel, it gets everything; when several, they share in proportion
  to their durations and ``estimated`` is true.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kinetolens.model.trace import Trace
from kinetolens.registry.flops import REGISTRY, OpArgs, evaluate
from kinetolens.registry.flops_base import Work

_KEY = ["name", "input_dims", "input_types", "concrete_inputs"]


def _evaluate_ops(ops: pl.DataFrame) -> dict[int, Work]:
    """Work of every registered op call, computing each distinct argument set once."""
    cols = ["op_id", *_KEY, "fwd_op_id"]
    present = [c for c in cols if c in ops.columns]
    cand = ops.select(present).filter(pl.col("name").is_in(list(REGISTRY)))
    if "concrete_inputs" not in cand.columns:
        cand = cand.with_columns(concrete_inputs=pl.lit(None, pl.String))
    if "fwd_op_id" not in cand.columns:
        cand = cand.with_columns(fwd_op_id=pl.lit(None, pl.Int64))
    fwd_rows = {}
    needs_fwd = {n for n, e in REGISTRY.items() if e.needs_forward}
    fwd_ids = cand.filter(pl.col("name").is_in(list(needs_fwd)) & pl.col("fwd_op_id").is_not_null())["fwd_op_id"]
    if fwd_ids.len():
        src = ops.filter(pl.col("op_id").is_in(fwd_ids.unique().implode()))
        for r in src.select("op_id", *_KEY).iter_rows():
            fwd_rows[r[0]] = OpArgs.parse(r[1], r[2], r[3], r[4])
    bwd_rows = _backward_rows(ops, cand)
    # A training run repeats the same calls every step: evaluate each
    # distinct argument set once and hand the result to every call of it.
    cand = cand.with_columns(
        fwd_key=pl.when(pl.col("name").is_in(list(needs_fwd)) & pl.col("fwd_op_id").is_in(list(fwd_rows))).then(
            "fwd_op_id"
        ),
        bwd_key=pl.col("op_id").is_in(list(bwd_rows)),
    )
    keys = [*_KEY, "fwd_key"]
    out: dict[int, Work] = {}
    # Calls whose formula reads their backward are few: one each.
    for op_id, name, dims, types, concrete, fwd_id in cand.filter("bwd_key").select(cand.columns[:6]).iter_rows():
        fwd = fwd_rows.get(fwd_id) if name in needs_fwd else None
        work = evaluate(OpArgs.parse(name, dims, types, concrete, fwd, OpArgs.parse(*bwd_rows[op_id])))
        if work is not None:
            out[op_id] = work
    plain = cand.filter(~pl.col("bwd_key"))
    works = {}
    for name, dims, types, concrete, fwd_id in plain.select(keys).unique().iter_rows():
        fwd = fwd_rows.get(fwd_id) if fwd_id is not None else None
        work = evaluate(OpArgs.parse(name, dims, types, concrete, fwd))
        if work is not None:
            works[(name, dims, types, concrete, fwd_id)] = work
    if works:
        found = pl.DataFrame(
            [(*key, i) for i, key in enumerate(works)],
            schema={**dict.fromkeys(_KEY, pl.String), "fwd_key": pl.Int64, "work": pl.Int64},
            orient="row",
        )
        hits = plain.join(found, on=keys, how="inner", nulls_equal=True)
        table = list(works.values())
        out.update(zip(hits["op_id"].to_list(), map(table.__getitem__, hits["work"].to_list())))
    return dict(sorted(out.items()))


def _backward_rows(ops: pl.DataFrame, cand: pl.DataFrame) -> dict[int, tuple]:
    """For registered ops that read their backward (``needs_backward``), the
    first backward op linked to them (``fwd_op_id``), as ``(name, input_dims,
    input_types, concrete_inputs)``."""
    wanted = [n for n, e in REGISTRY.items() if e.needs_backward]
    ids = cand.filter(pl.col("name").is_in(wanted))["op_id"]
    if not ids.len() or "fwd_op_id" not in ops.columns:
        return {}
    linked = ops.filter(pl.col("fwd_op_id").is_in(ids.implode())).sort("op_id").unique("fwd_op_id", keep="first")
    if "concrete_inputs" not in linked.columns:
        linked = linked.with_columns(concrete_inputs=pl.lit(None, pl.String))
    return {r[0]: r[1:] for r in linked.select("fwd_op_id", *_KEY).iter_rows()}


def _carriers(ops: pl.DataFrame, works: dict[int, Work]) -> list[int | None]:
    """For every op (by position = op_id), the op_id whose work covers it, or None."""
    n = ops.height
    names = ops["name"].to_list()
    parents = ops["parent_id"].to_list()
    # Families with a formula strictly below each op (only kept where non-empty).
    below: list[set[str] | None] = [None] * n
    for i in range(n - 1, -1, -1):
        p = parents[i]
        if p is None:
            continue
        mine = below[i]
        fam = REGISTRY[names[i]].family if i in works else None
        if mine is None and fam is None:
            continue
        acc = below[p]
        if acc is None:
            acc = below[p] = set()
        if mine:
            acc |= mine
        if fam:
            acc.add(fam)
    carrier: list[int | None] = [None] * n
    for i in range(n):
        p = parents[i]
        inherited = carrier[p] if p is not None else None
        if inherited is not None:
            carrier[i] = inherited
            continue
        if i not in works:
            continue
        entry = REGISTRY[names[i]]
        if entry.composite and below[i]:
            wanted = entry.defers_to
            if wanted is None or below[i] & wanted:  # type: ignore[operator]
                continue
        carrier[i] = i
    return carrier


@dataclass(frozen=True)
class CarriedWork:
    """Every op's work evaluated once, in the two shapes the analyses need.

    ``ops``: one row per op call that carries work (``op_id, flops, bytes,
    formula``).  ``kernels``: every GPU activity whose op (or an ancestor)
    carries work, with that ``carrier`` op (``kernel_id, op_id, kind, dur,
    carrier``).
    """

    ops: pl.DataFrame
    kernels: pl.DataFrame


def carried_work(trace: Trace) -> CarriedWork:
    """Evaluate the formulas of all ops once and find which op carries each
    kernel's work (see the module docstring)."""
    ordered = trace.ops.sort("op_id")
    works = _evaluate_ops(ordered)
    carrier = _carriers(ordered, works)
    ops = pl.DataFrame(
        [(i, w.flops, w.bytes, w.formula) for i, w in works.items() if carrier[i] == i],
        schema={"op_id": pl.Int64, "flops": pl.Float64, "bytes": pl.Float64, "formula": pl.String},
        orient="row",
    ).sort("op_id")
    k = trace.kernels.filter(pl.col("op_id").is_not_null()).select(
        "kernel_id", "op_id", pl.col("kind").cast(pl.String), "dur"
    )
    kernels = k.with_columns(
        pl.Series("carrier", [carrier[i] for i in k["op_id"].to_list()], dtype=pl.Int64)
    ).filter(pl.col("carrier").is_not_null())
    return CarriedWork(ops, kernels)


def op_work(trace: Trace) -> pl.DataFrame:
    """One row per op call that carries work: ``op_id, flops, bytes, formula``."""
    return carried_work(trace).ops


def kernel_work(trace: Trace, carried: CarriedWork | None = None) -> pl.DataFrame:
    """One row per kernel whose op carries work: ``kernel_id, flops, bytes, estimated``."""
    carried = carried or carried_work(trace)
    schema = {"kernel_id": pl.Int64, "flops": pl.Float64, "bytes": pl.Float64, "estimated": pl.Boolean}
    if not carried.kernels.height:
        return pl.DataFrame(schema=schema)
    per_op = carried.ops.select(
        carrier=pl.col("op_id"), op_flops=pl.col("flops"), op_bytes=pl.col("bytes")
    )
    k = carried.kernels
    k = k.join(per_op, on="carrier", how="inner")
    compute = pl.col("kind") == "kernel"
    # Share within the kernels that do the op's work: compute kernels if any, else its copies.
    k = k.with_columns(has_compute=compute.any().over("carrier"))
    sharing = pl.when(pl.col("has_compute")).then(compute).otherwise(pl.lit(True))
    k = k.with_columns(
        sharing=sharing,
        weight=pl.when(sharing).then(pl.col("dur").cast(pl.Float64).clip(lower_bound=0)).otherwise(0.0),
    )
    k = k.with_columns(
        n_share=pl.col("sharing").sum().over("carrier"),
        w_total=pl.col("weight").sum().over("carrier"),
    )
    frac = (
        pl.when(~pl.col("sharing"))
        .then(0.0)
        .when(pl.col("w_total") > 0)
        .then(pl.col("weight") / pl.col("w_total"))
        .otherwise(1.0 / pl.col("n_share"))
    )
    flops_frac = pl.when(compute).then(frac).otherwise(0.0)
    return k.select(
        "kernel_id",
        flops=pl.col("op_flops") * flops_frac,
        bytes=pl.col("op_bytes") * frac,
        estimated=pl.col("sharing") & (pl.col("n_share") > 1),
    ).sort("kernel_id")
