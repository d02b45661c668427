"""What each kernel that ``torch.compile`` generated fuses, and its FLOPs and bytes.

The facts the work of an op needs (:func:`generated_op_work`), kept apart from
the kernel tables of :mod:`kinetolens.analysis.hardware.compiled_kernels` so that the
work of ops does not depend on the roofline built from it.  Sources: the
FX nodes ``kinetolens.profile`` records (run metadata key
``inductor_kernels``), else the kernel's name; see
:mod:`kinetolens.analysis.hardware.compiled_kernels`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from kinetolens.formats import RUN_METADATA_KEY
from kinetolens.model.compiled_modules import METADATA_KEY
from kinetolens.model.trace import Trace
from kinetolens.registry.flops import FormulaError, OpArgs, evaluate
from kinetolens.registry.flops_base import json_list
from kinetolens.registry.inductor_names import GeneratedName, parse

_WORK_SCHEMA = {"op_id": pl.Int64, "flops": pl.Float64, "bytes": pl.Float64, "formula": pl.String}


@dataclass(frozen=True)
class Fusion:
    """What one generated kernel fuses and where that came from."""

    name: GeneratedName
    fused_ops: tuple[str, ...]
    modules: tuple[str, ...]
    provenance: str  # "inductor" or "name"
    nodes: tuple[dict[str, Any], ...] = ()  # the recorded FX nodes (inductor only)
    sources: tuple[str, ...] = ()


def recorded(trace: Trace) -> dict[str, list[dict[str, Any]]]:
    """The capture's records: profiler name -> records (empty when none)."""
    run = trace.metadata.get(RUN_METADATA_KEY)
    kernels = run.get(METADATA_KEY) if isinstance(run, dict) else None
    return kernels if isinstance(kernels, dict) else {}


def _distinct(values: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v for v in values if v))


def fusion(name: str, records: dict[str, list[dict[str, Any]]] | None = None) -> Fusion | None:
    """What kernel ``name`` fuses: from the capture's records when it has
    them (one record per graph that generated that name: their nodes
    together), else from the name; None for a name inductor did not give."""
    parsed = parse(name)
    if parsed is None:
        return None
    found = (records or {}).get(name) or []
    nodes = tuple(n for r in found if isinstance(r, dict) for n in r.get("ops") or [] if isinstance(n, dict))
    if not nodes:
        return Fusion(parsed, parsed.ops, (), "name")
    fused = _distinct(n.get("of") or n.get("op") for n in nodes)
    modules = _distinct(n.get("module") for n in nodes)
    return Fusion(parsed, fused, modules, "inductor", nodes, _distinct(n.get("source") for n in nodes))


def fused_op_names(trace: Trace, names: pl.Series) -> pl.Series:
    """For each kernel name, its fused source ops as text (``add, mul, relu``;
    null for kernels torch.compile did not generate), once per distinct name."""
    records = recorded(trace)
    mapping: dict[str, str | None] = {}
    for name in names.drop_nulls().unique().to_list():
        found = fusion(name, records)
        mapping[name] = ", ".join(op.removeprefix("aten::") for op in found.fused_ops) if found else None
    return names.replace_strict(mapping, default=None, return_dtype=pl.String).alias("fused_ops")


def _node_work(nodes: tuple[dict[str, Any], ...]) -> tuple[float, float | None, str]:
    """Sum of the nodes' registry work and the formula text naming what had none."""
    flops, moved, missing = 0.0, 0.0, []
    bytes_known = True
    for node in nodes:
        op = OpArgs(str(node.get("op")), list(node.get("dims") or []), list(node.get("types") or []),
                    list(node.get("concrete") or []))  # fmt: skip
        try:
            work = evaluate(op)
        except FormulaError:
            work = None
        if work is None:
            missing.append(op.name.split("::")[-1])
            continue
        flops += work.flops
        if work.bytes is None:
            bytes_known = False
        else:
            moved += work.bytes
    counted = len(nodes) - len(missing)
    text = f"sum of {counted} fused op(s)"
    if missing:
        text += f"; no formula: {', '.join(dict.fromkeys(missing))}"
    return flops, (moved if bytes_known else None), text


def _launch_work(ops: tuple[str, ...], dims: str | None, types: str | None) -> tuple[float, float | None, str] | None:
    """Name-only work of a Triton launch from its recorded arguments (module docstring)."""
    shapes, dtypes = json_list(dims), json_list(types)
    tensors = [
        (math.prod(s), dtypes[i] if i < len(dtypes) else None)
        for i, s in enumerate(shapes)
        if isinstance(s, list) and s and all(isinstance(d, int) for d in s)
    ]
    if not tensors:
        return None
    numel, dtype = max(tensors, key=lambda t: t[0])
    flops = 0.0
    for op in ops:
        try:
            work = evaluate(OpArgs(op, [[numel]], [dtype], [""]))
        except FormulaError:
            work = None
        flops += work.flops if work is not None else 0.0
    probe = OpArgs("", [[n] for n, _ in tensors], [t for _, t in tensors], [])
    sizes = [t.nbytes for t in probe.tensors()]
    moved = None if not sizes or any(s is None for s in sizes) else float(sum(s for s in sizes if s is not None))
    return flops, moved, f"{len(ops)} fused op(s) x {numel} elements (from the name); bytes: the kernel's arguments"


def generated_op_work(trace: Trace) -> pl.DataFrame:
    """Work of the ops that stand for generated kernels (C++ kernels' ranges,
    Triton launches): ``op_id, flops, bytes, formula``, for
    :mod:`kinetolens.analysis.workload.work` to carry like any op's."""
    ops = trace.ops
    if not ops.height:
        return pl.DataFrame(schema=_WORK_SCHEMA)
    cand = ops.filter(pl.col("name").str.contains(r"(?:^|_)(?:cpp|triton_[a-z]+)_fused_")).select(
        "op_id", "name", "input_dims", "input_types"
    )
    if not cand.height:
        return pl.DataFrame(schema=_WORK_SCHEMA)
    records = recorded(trace)
    rows = []
    memo: dict[tuple[str, str | None, str | None], tuple[float, float | None, str] | None] = {}
    for op_id, name, dims, types in cand.iter_rows():
        key = (name, dims, types)
        if key not in memo:
            fused = fusion(name, records)
            if fused is None:
                memo[key] = None
            elif fused.nodes:
                memo[key] = _node_work(fused.nodes)
            elif fused.name.backend == "triton":
                memo[key] = _launch_work(fused.fused_ops, dims, types)
            else:
                memo[key] = None
        work = memo[key]
        if work is not None:
            rows.append((op_id, *work))
    return pl.DataFrame(rows, schema=_WORK_SCHEMA, orient="row")
