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

import math
from dataclasses import dataclass

import polars as pl

from kinetolens.analysis.session import per_trace, session_of
from kinetolens.analysis.workload.fusions import generated_op_work
from kinetolens.errors import TraceWarning
from kinetolens.model.nesting import outermost_marked
from kinetolens.model.trace import Trace
from kinetolens.registry.flops import REGISTRY, FormulaError, OpArgs, Work, evaluate
from kinetolens.registry.flops_paged_attention import BatchStats, step_batch
from kinetolens.registry.tensor_cores import YES, classify

_KEY = ["name", "input_dims", "input_types", "concrete_inputs"]


_RESULT_SCHEMA = {"flops": pl.Float64, "bytes": pl.Float64, "formula": pl.String}
_WORK_SCHEMA = {"op_id": pl.Int64, **_RESULT_SCHEMA}
#: The op columns the evaluation and the carrier search read.
_OP_COLUMNS = ["op_id", "parent_id", "depth", *_KEY, "fwd_op_id"]


#: The kind of the counted warning a failing FLOP formula leaves on the trace.
FORMULA_FAILED = "FLOP formula failed"


class _Failures:
    """Formula errors met while evaluating a trace: calls and first reason per op name."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.reasons: dict[str, str] = {}

    def evaluate(self, op: OpArgs, calls: int = 1) -> Work | None:
        try:
            return evaluate(op)
        except FormulaError as err:
            self.calls[op.name] = self.calls.get(op.name, 0) + calls
            self.reasons.setdefault(op.name, err.reason)
            return None

    def warnings(self) -> list[TraceWarning]:
        return [
            TraceWarning(FORMULA_FAILED, n, f"{name}: {self.reasons[name]}; those calls have no FLOPs, bytes or roofline")
            for name, n in sorted(self.calls.items())
        ]


def _evaluate_ops(ops: pl.DataFrame, failures: _Failures | None = None) -> pl.DataFrame:
    """Work of every registered op call (``op_id, flops, bytes, formula``, by
    op_id), computing each distinct argument set once; formula errors are
    counted per call in ``failures``."""
    failures = failures if failures is not None else _Failures()
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
    batches = _step_batches(ops, cand)
    below = _ops_below(ops, cand)
    # A training run repeats the same calls every step: evaluate each
    # distinct argument set once and hand the result to every call of it.
    cand = cand.with_columns(
        fwd_key=pl.when(pl.col("name").is_in(list(needs_fwd)) & pl.col("fwd_op_id").is_in(list(fwd_rows))).then(
            "fwd_op_id"
        ),
        bwd_key=pl.col("op_id").is_in(list(bwd_rows)) | pl.col("op_id").is_in(list(batches))
        | pl.col("op_id").is_in(list(below)),
    )
    keys = [*_KEY, "fwd_key"]
    # Calls whose formula reads their backward or their engine step are few: one each.
    single = []
    for op_id, name, dims, types, concrete, fwd_id in cand.filter("bwd_key").select(cand.columns[:6]).iter_rows():
        fwd = fwd_rows.get(fwd_id) if name in needs_fwd else None
        bwd = OpArgs.parse(*bwd_rows[op_id]) if op_id in bwd_rows else None
        op = OpArgs.parse(name, dims, types, concrete, fwd, bwd)
        op.batch = batches.get(op_id)
        op.below = below.get(op_id)
        work = failures.evaluate(op)
        if work is not None:
            single.append((op_id, work.flops, work.bytes, work.formula))
    plain = cand.filter(~pl.col("bwd_key"))
    shared = []
    for name, dims, types, concrete, fwd_id, calls in plain.group_by(keys).len().iter_rows():
        fwd = fwd_rows.get(fwd_id) if fwd_id is not None else None
        work = failures.evaluate(OpArgs.parse(name, dims, types, concrete, fwd), calls)
        if work is not None:
            shared.append((name, dims, types, concrete, fwd_id, work.flops, work.bytes, work.formula))
    found = pl.DataFrame(
        shared,
        schema={**dict.fromkeys(_KEY, pl.String), "fwd_key": pl.Int64, **_RESULT_SCHEMA},
        orient="row",
    )
    hits = plain.join(found, on=keys, how="inner", nulls_equal=True).select(*_WORK_SCHEMA)
    return pl.concat([pl.DataFrame(single, schema=_WORK_SCHEMA, orient="row"), hits]).sort("op_id")


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


def _step_batches(ops: pl.DataFrame, cand: pl.DataFrame) -> dict[int, BatchStats]:
    """For registered ops that read their engine step's sequences (``needs_batch``),
    the sequences parsed from the nearest enclosing step annotation (vLLM's and
    SGLang's ``execute_..._context_..._generation_...``)."""
    wanted = [n for n, e in REGISTRY.items() if e.needs_batch]
    ids = cand.filter(pl.col("name").is_in(wanted))["op_id"].to_list()
    if not ids:
        return {}
    steps = {}
    for op_id, name in ops.filter(pl.col("name").str.starts_with("execute_")).select("op_id", "name").iter_rows():
        stats = step_batch(name)
        if stats is not None:
            steps[op_id] = stats
    if not steps:
        return {}
    parent = dict(ops.select("op_id", "parent_id").iter_rows())
    out = {}
    for op_id in ids:
        up = parent.get(op_id)
        while up is not None and up not in steps:
            up = parent.get(up)
        if up is not None:
            out[op_id] = steps[up]
    return out


def _ops_below(ops: pl.DataFrame, cand: pl.DataFrame) -> dict[int, list[OpArgs]]:
    """For registered ops that read the ops they call (``needs_below``), those
    ops' arguments, in call order."""
    wanted = [n for n, e in REGISTRY.items() if e.needs_below]
    ids = cand.filter(pl.col("name").is_in(wanted))["op_id"].to_list()
    if not ids:
        return {}
    children: dict[int, list[int]] = {}
    for op_id, parent in ops.select("op_id", "parent_id").iter_rows():
        if parent is not None:
            children.setdefault(parent, []).append(op_id)
    rows = ops.select(pl.col(c) if c in ops.columns else pl.lit(None, pl.String).alias(c) for c in _KEY)
    out = {}
    for op_id in ids:
        found, stack = [], list(reversed(children.get(op_id, [])))
        while stack:
            i = stack.pop()
            found.append(i)
            stack.extend(reversed(children.get(i, [])))
        out[op_id] = [OpArgs.parse(*rows.row(i)) for i in sorted(found)]
    return out


def _family_facts() -> pl.DataFrame:
    """Per registered op name: its family as one bit, whether it is composite,
    and the bits of the families it defers to (every bit when any family)."""
    families = sorted({e.family for e in REGISTRY.values()})
    bit = {f: 1 << i for i, f in enumerate(families)}
    every = (1 << len(families)) - 1
    rows = [
        (name, bit[e.family], e.composite, every if e.defers_to is None else sum(bit[f] for f in e.defers_to if f in bit))
        for name, e in REGISTRY.items()
    ]
    return pl.DataFrame(
        rows, schema={"name": pl.String, "bit": pl.UInt32, "composite": pl.Boolean, "defers": pl.UInt32}, orient="row"
    )


def _families_below(ops: pl.DataFrame, own: pl.Series) -> pl.Series:
    """Per op (by position = op_id), the family bits of every op strictly below it.

    Bottom-up, one nesting level at a time (children are one level deeper
    than their parent), each level OR-ing its bits into its parents: one
    vectorized pass per level instead of a Python step per op.
    """
    below = pl.zeros(ops.height, pl.UInt32, eager=True)
    levels = (
        ops.select("op_id", "parent_id", "depth", own=own)
        .filter(pl.col("parent_id").is_not_null())
        .partition_by("depth", as_dict=True)
    )
    for depth in sorted(levels, reverse=True):
        level = levels[depth]
        mask = below.gather(level["op_id"]) | level["own"]
        up = (
            pl.DataFrame({"p": level["parent_id"], "m": mask})
            .filter(pl.col("m") != 0)
            .group_by("p")
            .agg(pl.col("m").bitwise_or())
        )
        if up.height:
            below = below.scatter(up["p"], below.gather(up["p"]) | up["m"])
    return below


def _carriers(ops: pl.DataFrame, works: pl.DataFrame) -> pl.Series:
    """For every op (by position = op_id), the op_id whose work covers it, or null.

    An op carries its own work when it has some and is not a composite with
    an op of a family it defers to below it; an op is covered by its
    outermost ancestor-or-self that carries its own work.
    """
    if works.height == 0:
        return pl.repeat(None, ops.height, dtype=pl.Int64, eager=True)
    facts = ops.select("name").join(_family_facts(), on="name", how="left", maintain_order="left")
    has_work = ops["op_id"].is_in(works["op_id"].implode())
    own = pl.select(pl.when(has_work).then(facts["bit"]).otherwise(0).cast(pl.UInt32)).to_series()
    below = _families_below(ops, own)
    blocked = facts["composite"].fill_null(False) & ((below & facts["defers"].fill_null(0)) != 0)
    return outermost_marked(ops["parent_id"], has_work & ~blocked)


#: Ops that pass their input on unchanged in shape (a no-op ``to`` after an ``expand`` keeps the view).
_SAME_SHAPE = frozenset({"aten::to", "aten::_to_copy", "aten::contiguous"})


def _first_dims(dims: str | None) -> list | None:
    from kinetolens.registry.flops_base import json_list

    first = (json_list(dims) or [None])[0]
    return first if isinstance(first, list) and first else None


def _expanded_reads(ops: pl.DataFrame, works: pl.DataFrame) -> pl.DataFrame:
    """Bytes of ops whose first input is a broadcast view (``aten::expand`` just before them
    under the same parent): the kernel reads the expanded tensor's storage, not its logical size.

    Traces record no strides, so the formula counts every element of
    ``[32, 2048, 7, 7]`` read where ``MeanBackward1`` expanded a
    ``[32, 2048, 1, 1]`` gradient: 12.8 MB where 0.26 MB is read, an ideal
    time longer than the kernel took.  The difference is taken off the bytes.
    """
    from kinetolens.registry.dtypes import dtype_bytes
    from kinetolens.registry.flops_base import json_list

    if works.height == 0 or "aten::expand" not in set(ops["name"].to_list()):
        return works
    rows = ops.select("op_id", "parent_id", "name", "input_dims", "input_types").rows()
    previous: dict[int, int | None] = {}  # each op's preceding sibling
    last: dict[int | None, int] = {}
    for op_id, parent, *_ in rows:
        previous[op_id] = last.get(parent)
        last[parent] = op_id
    by_id = {r[0]: r for r in rows}
    less: dict[int, float] = {}
    for op_id, bytes_ in works.select("op_id", "bytes").rows():
        row = by_id.get(op_id)
        if bytes_ is None or row is None or row[1] is None:
            continue
        dims = _first_dims(row[3])
        size = dtype_bytes(((json_list(row[4]) or [None])[0]))
        if dims is None or not size:
            continue
        sib = previous.get(op_id)
        while sib is not None and by_id[sib][2] in _SAME_SHAPE and _first_dims(by_id[sib][3]) == dims:
            sib = previous.get(sib)
        if sib is None or by_id[sib][2] != "aten::expand":
            continue
        small = _first_dims(by_id[sib][3])
        if small is None or len(small) != len(dims) or any(a not in (1, b) for a, b in zip(small, dims)):
            continue
        less[op_id] = (math.prod(dims) - math.prod(small)) * size
    if not less:
        return works
    taken = pl.col("op_id").replace_strict(less, default=0.0, return_dtype=pl.Float64)
    return works.with_columns(bytes=(pl.col("bytes") - taken).clip(lower_bound=0.0))


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


@per_trace
def carried_work(trace: Trace) -> CarriedWork:
    """Evaluate the formulas of all ops once and find which op carries each
    kernel's work (see the module docstring).

    A formula that fails for a reason other than its arguments (a bug) leaves
    its calls without work and a counted :class:`TraceWarning` naming the op
    in the trace's session warnings (kind :data:`FORMULA_FAILED`), which
    every view that lists the trace's warnings shows (:func:`warnings_of`).
    """
    ordered = trace.ops.select(c for c in _OP_COLUMNS if c in trace.ops.columns).sort("op_id")
    failures = _Failures()
    works = _evaluate_ops(ordered, failures)
    generated = generated_op_work(trace)  # torch.compile's kernels: the sum of the ops they fuse
    if generated.height:
        works = pl.concat([works.filter(~pl.col("op_id").is_in(generated["op_id"].implode())), generated]).sort("op_id")
    for warning in failures.warnings():
        session_of(trace).warn(warning)
    works = _expanded_reads(ordered, works)
    carrier = _carriers(ordered, works)
    ops = works.filter(carrier.gather(works["op_id"]) == works["op_id"])
    k = trace.kernels.lazy().filter(pl.col("op_id").is_not_null()).select(
        "kernel_id", "op_id", pl.col("kind").cast(pl.String), "dur"
    ).collect()  # lazy: four columns filtered, not the whole table
    kernels = k.with_columns(carrier=carrier.gather(k["op_id"])).filter(pl.col("carrier").is_not_null())
    return CarriedWork(ops, kernels)


def op_work(trace: Trace) -> pl.DataFrame:
    """One row per op call that carries work: ``op_id, flops, bytes, formula``."""
    return carried_work(trace).ops


@per_trace
def kernel_work(trace: Trace) -> pl.DataFrame:
    """One row per kernel whose op carries work: ``kernel_id, flops, bytes, estimated``."""
    carried = carried_work(trace)
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
    # An op whose kernels include Tensor Core ones (a fused MoE layer's two grouped GEMMs beside its
    # routing and quantization kernels) did its FLOPs there: they share the FLOPs, all share the bytes.
    names = trace.kernels.select("kernel_id", "name").filter(pl.col("kernel_id").is_in(k["kernel_id"].implode()))
    matrix = [n for n in names["name"].unique().drop_nulls().to_list() if classify(n)[0] == YES]
    k = k.join(names, on="kernel_id", how="left").with_columns(tc=compute & pl.col("name").is_in(matrix))
    k = k.with_columns(
        has_tc=pl.col("tc").any().over("carrier"),
        tc_total=pl.when(pl.col("tc")).then(pl.col("weight")).otherwise(0.0).sum().over("carrier"),
        n_tc=pl.col("tc").sum().over("carrier"),
    )
    tc_frac = (
        pl.when(~pl.col("tc"))
        .then(0.0)
        .when(pl.col("tc_total") > 0)
        .then(pl.col("weight") / pl.col("tc_total"))
        .otherwise(1.0 / pl.col("n_tc"))
    )
    flops_frac = pl.when(pl.col("has_tc")).then(tc_frac).when(compute).then(frac).otherwise(0.0)
    return k.select(
        "kernel_id",
        flops=pl.col("op_flops") * flops_frac,
        bytes=pl.col("op_bytes") * frac,
        estimated=pl.col("sharing") & (pl.col("n_share") > 1),
    ).sort("kernel_id")
