"""NVTX ranges written by ``kinetolens.nvtx``, read back from an nsys export.

``kinetolens.nvtx`` (see :mod:`kinetolens.capture.nvtx`) pushes, for every
aten op, a range whose text is ``kinetolens `` + compact JSON (op, module
path, argument shapes and dtypes, call site), and a ``kinetolens.module
PATH`` range around each module's forward, on top of torch's ``emit_nvtx``
ranges.  Here those ranges become what a Kineto trace would have given:

* an op marker becomes an op named by its ``op``, with ``input_dims`` and
  ``input_types`` as the same JSON text Kineto's ``Input Dims``/``Input
  type`` args hold (``[]`` and ``""`` for a non-tensor argument,
  ``TensorList`` for a list of tensors), ``source`` = the call site and
  ``module`` = the module path;
* a module range becomes an annotation named ``nn.Module: PATH``, so modules
  nest around their ops as they do in Kineto traces;
* ranges with no marker of their own (emit_nvtx ops the dispatch mode does
  not see, such as ``aten::linear`` around ``aten::addmm``, or ops an op
  marker's implementation calls) take module and call site from the
  innermost range around them that has them, as Kineto ops take them from
  the enclosing Python frames.

One op, one row.  torch records an emit_nvtx range where the dispatcher
enters the op, before the autograd layer; the dispatch mode that pushes the
marker runs below autograd, so the marker of the same call opens inside the
emit_nvtx range of the same name, on the same thread, as its direct child
(same start and end at most).  The two are merged: the op keeps everything
the marker says and the emit_nvtx range's autograd sequence number (which
pairs backward ops with it) and interval (the whole call as the dispatcher
saw it, which is what Kineto records for the op); the marker's own row is
dropped, so the call's GPU time is counted once.  A marker with no such
emit_nvtx parent (``keep_markers`` or a build without emit_nvtx) stands
alone.  A marker whose JSON does not parse stays a range named by its text.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from kinetolens.formats import MODULE_RANGE_PREFIX
from kinetolens.formats import NVTX_MODULE_PREFIX as MODULE_MARKER_PREFIX
from kinetolens.formats import NVTX_OP_PREFIX as OP_MARKER_PREFIX
from kinetolens.ingest.categories import ANNOTATION


def has_markers(names: pl.Series) -> bool:
    """Whether any range text was written by ``kinetolens.nvtx``."""
    return bool(names.str.starts_with(OP_MARKER_PREFIX.rstrip()).any())


def _json_text(value: Any) -> str:
    return json.dumps(value)


def decode_op_marker(text: str) -> dict[str, Any] | None:
    """An op marker's fields in the model's columns, or None if it is not one.

    ``input_dims``/``input_types`` are JSON text laid out as Kineto's args,
    so :mod:`kinetolens.analysis.workload.params` and the FLOP registry read both.
    """
    if not text.startswith(OP_MARKER_PREFIX) or text.startswith(MODULE_MARKER_PREFIX):
        return None
    try:
        data = json.loads(text[len(OP_MARKER_PREFIX) :])
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("op"), str):
        return None
    shapes = data.get("shapes") if isinstance(data.get("shapes"), list) else []
    dtypes = data.get("dtypes") if isinstance(data.get("dtypes"), list) else []
    dims = [shape if isinstance(shape, list) else [] for shape in shapes]
    types = [
        "TensorList" if isinstance(dtype, list) else dtype if isinstance(dtype, str) else "" for dtype in dtypes
    ]
    module, site = data.get("module"), data.get("site")
    return {
        "name": data["op"],
        "input_dims": _json_text(dims),
        "input_types": _json_text(types),
        "module": module if isinstance(module, str) and module else None,
        "source": site if isinstance(site, str) and site else None,
    }


def _closed_before(start: int, end: int, at: int) -> bool:
    """Whether a range is over when another starts at ``at`` (ranges are
    half-open; an instant range still holds those starting at its instant)."""
    return end < at or (end == at and end > start)


def resolve_markers(rows: pl.DataFrame) -> pl.DataFrame:
    """Host rows of NVTX ranges with ``kinetolens.nvtx`` markers applied.

    ``rows`` are NVTX ranges as host rows (``name``, ``kind``, ``pid``,
    ``tid``, ``ts``, ``dur``, ``sequence_number``, ``input_dims``,
    ``input_types``, ``module``, ``source``), emit_nvtx names already split
    from their ``seq``; see the module docstring for what changes.
    """
    rows = rows.with_row_index("_row").sort(
        ["pid", "tid", "ts", "dur", "_row"], descending=[False, False, False, True, False], nulls_last=True
    )
    names: list[str | None] = rows["name"].to_list()
    kinds: list[str] = rows["kind"].cast(pl.String).to_list()
    seqs: list[int | None] = rows["sequence_number"].to_list()
    dims: list[str | None] = rows["input_dims"].to_list()
    types: list[str | None] = rows["input_types"].to_list()
    modules: list[str | None] = rows["module"].to_list()
    sources: list[str | None] = rows["source"].to_list()
    threads = list(zip(rows["pid"].to_list(), rows["tid"].to_list()))
    starts: list[int] = rows["ts"].to_list()
    ends = [s + d for s, d in zip(starts, rows["dur"].to_list())]
    keep = [True] * rows.height
    merged = [False] * rows.height

    stack: list[int] = []
    thread: Any = None
    for i in range(rows.height):
        if threads[i] != thread:
            thread, stack = threads[i], []
        while stack and _closed_before(starts[stack[-1]], ends[stack[-1]], starts[i]):
            stack.pop()
        parent = stack[-1] if stack else None
        text = names[i] or ""
        marker = decode_op_marker(text)
        if text.startswith(MODULE_MARKER_PREFIX):
            path = text[len(MODULE_MARKER_PREFIX) :]
            names[i], kinds[i], modules[i] = MODULE_RANGE_PREFIX + path, ANNOTATION, path
        elif marker is not None:
            if (
                parent is not None
                and not merged[parent]
                and seqs[parent] is not None
                and names[parent] == marker["name"]
                and ends[parent] >= ends[i]
            ):
                # The emit_nvtx range of this very call: it becomes the op.
                keep[i], merged[parent] = False, True
                dims[parent], types[parent] = marker["input_dims"], marker["input_types"]
                modules[parent] = marker["module"] or modules[parent]
                sources[parent] = marker["source"] or sources[parent]
                continue
            names[i], dims[i], types[i] = marker["name"], marker["input_dims"], marker["input_types"]
            modules[i], sources[i] = marker["module"], marker["source"]
        if parent is not None:
            modules[i] = modules[i] or modules[parent]
            sources[i] = sources[i] or sources[parent]
        stack.append(i)

    return (
        rows.with_columns(
            pl.Series("name", names, dtype=pl.String),
            pl.Series("kind", kinds, dtype=pl.String).cast(rows.schema["kind"]),
            pl.Series("input_dims", dims, dtype=pl.String),
            pl.Series("input_types", types, dtype=pl.String),
            pl.Series("module", modules, dtype=pl.String),
            pl.Series("source", sources, dtype=pl.String),
        )
        .filter(pl.Series(keep))
        .sort("_row")
        .drop("_row")
    )
