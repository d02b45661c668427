"""Phases of inference: a trace cut into engine iterations, each labelled
prefill, decode or mixed.

An *iteration* is one forward over a batch: what an engine's scheduler
runs each step.  Where it comes from, first that applies:

1. ``engine``: the engine's own iteration annotations (vLLM ``execute_*``,
   SGLang ``step[...]``, ATOM ``prefill[...]``/``decode[...]``; see
   :mod:`kinetolens.analysis.inference.engine_annotations`).  Nested ones (SGLang
   records ``step[EXTEND ...]`` inside ``execute_...``) are one iteration,
   the outermost range.  Their counts label it.
2. ``forward``: each call of the model's root ``nn.Module`` that embeds
   token ids (the python ranges ``with_stack``/``with_modules`` record),
   else each call of the token embedding itself (one starts the next
   iteration).  Shapes label it, see below.
3. ``forward: root nn.Module call``: an inference trace that is not an LLM
   engine's (no engine annotation, no decode step; a diffusion pipeline's
   text encoders, denoiser steps and image decoder): each root
   ``nn.Module`` call is an iteration and its phase is the module's class
   (``T5EncoderModel``), never an invented prefill or decode.

An iteration's time is its host range extended over the GPU work launched
in it, cut into disjoint windows exactly as profiler steps are
(:func:`kinetolens.model.steps.host_range_windows`), and broken down into
the categories of the step breakdown (:func:`kinetolens.analysis.gputime.overview.breakdown`;
the iteration annotations themselves are the iterations, not CPU work,
as ``ProfilerStep#N`` ranges are not).

Labels from shapes (``record_shapes``), first that applies:

* attention: ``scaled_dot_product_attention`` with query ``[B, H, Tq, D]``
  and key ``[B, H, Tk, D]``: ``Tq == 1`` with ``Tk > 1`` is decode (one
  new token per sequence against a KV cache), ``Tq > 1`` prefill;
* token ids ``[B, T]`` given to ``aten::embedding``: ``T == 1`` decode,
  ``T > 1`` prefill; ``B * T`` tokens;
* packed (varlen) attention with query ``[N, H, D]`` and ``cu_seqlens_q``
  ``[R + 1]`` (engines pack a batch into one row): ``N == R`` decode,
  ``N > R`` prefill;
* flattened token ids ``[N]`` and the ``[R, vocab]`` logits the sampler
  reads: the same rule.  (With packed shapes a batch mixing decode
  requests into a prefill looks like a prefill.)

Where an engine annotation labels an iteration, the shapes' label is
quoted beside it in ``basis`` (agreeing or not).

A trace is an *inference* trace (:func:`detect`) when it has no backward
or optimizer op and something says so: engine iteration annotations,
decode iterations found from shapes, paged KV-cache ops, or CUDA/HIP
graph replays.  ``tokens_per_s`` is tokens over the iteration's window.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import polars as pl

from kinetolens.analysis.gputime.overview import COLUMNS, breakdown, category_intervals
from kinetolens.analysis.gputime.step_times import StepTimes
from kinetolens.analysis.inference import engine_annotations
from kinetolens.analysis.inference.block import COMPONENT_SOURCE, InferenceBlock, Iteration, Phase
from kinetolens.analysis.session import per_trace
from kinetolens.model.steps import host_range_windows
from kinetolens.model.trace import Trace

PHASES = ("prefill", "decode", "mixed", "unknown")
#: Ops that write a paged KV cache: only an inference engine runs them.
KV_CACHE_OPS = r"(reshape_and_cache|unified_kv_cache_update|store_cache|set_kv_buffer|kv_cache)"
#: Attention ops whose inputs are ``[B, H, T, D]`` query, key, value.
_SDPA = r"^aten::_?scaled_dot_product"
#: Variable-length (packed) attention: query ``[N, H, D]`` and ``cu_seqlens_q`` ``[R + 1]`` among the inputs.
_VARLEN = r"(flash_attn_varlen|_flash_attention_forward|mha_varlen|mha_batch_prefill)"
_EMBEDDING = "aten::embedding"
_I64 = pl.Int64


@dataclass(frozen=True)
class Detection:
    """Whether a trace records inference, and the evidence, in words."""

    inference: bool
    evidence: tuple[str, ...]
    #: Why not, when there is evidence against (backward or optimizer ops).
    against: str | None = None


@per_trace
def _training(trace: Trace) -> str | None:
    if trace.ops.height == 0:
        return None
    seen = set(trace.ops["direction"].cast(pl.String).drop_nulls().unique().to_list())
    found = [d for d in ("bprop", "optimizer") if d in seen]
    return f"{' and '.join('backward' if d == 'bprop' else d for d in found)} ops ran (training)" if found else None


def _annotation_marks(trace: Trace) -> pl.DataFrame:
    """Outermost engine iteration annotations: ``op_id, name, tid, ts, cpu_end`` and their
    op ids with those nested in them (``inner``), in time order."""
    ops = trace.ops
    cand = ops.filter(pl.col("name").str.contains(engine_annotations.CANDIDATE) & ~pl.col("from_capture"))
    rows = [r for r in cand.select("op_id", "name", "tid", "ts", "end").sort("ts").iter_rows(named=True)
            if engine_annotations.parse(r["name"]) is not None]  # fmt: skip
    marks: list[dict[str, Any]] = []
    for r in rows:
        outer = marks[-1] if marks else None
        if outer is not None and r["ts"] < outer["cpu_end"] and r["tid"] == outer["tid"]:
            outer["inner"].append(r["op_id"])
            outer["names"].append(r["name"])
            continue
        marks.append({"op_id": r["op_id"], "name": r["name"], "tid": r["tid"], "ts": r["ts"], "cpu_end": r["end"],
                      "inner": [r["op_id"]], "names": [r["name"]]})  # fmt: skip
    return pl.DataFrame(
        marks,
        schema={"op_id": _I64, "name": pl.String, "tid": _I64, "ts": _I64, "cpu_end": _I64,
                "inner": pl.List(_I64), "names": pl.List(pl.String)},
    )  # fmt: skip


def _token_embeddings(trace: Trace) -> pl.DataFrame:
    """``aten::embedding`` calls given integer ids: ``op_id, tid, ts, end, ids`` (the ids' dims) and ``vocab``."""
    emb = trace.ops.filter((pl.col("name") == _EMBEDDING) & ~pl.col("from_capture"))
    rows = []
    for r in emb.select("op_id", "tid", "ts", "end", "input_dims", "input_types").iter_rows(named=True):
        dims, types = _loads(r["input_dims"]), _loads(r["input_types"]) or []
        if not dims or len(dims) < 2 or not dims[1] or not dims[0]:
            continue
        if len(types) > 1 and types[1] and "int" not in str(types[1]).lower() and "long" not in str(types[1]).lower():
            continue
        rows.append({"op_id": r["op_id"], "tid": r["tid"], "ts": r["ts"], "end": r["end"],
                     "ids": [int(x) for x in dims[1]], "vocab": int(dims[0][0])})  # fmt: skip
    found = pl.DataFrame(rows, schema={"op_id": _I64, "tid": _I64, "ts": _I64, "end": _I64, "ids": pl.List(_I64), "vocab": _I64})
    # The token embedding has the largest table: position embeddings (GPT-2's
    # wpe, also given integer ids) are left out, one embedding a forward.
    return found.filter(pl.col("vocab") == pl.col("vocab").max()) if found.height else found


def _loads(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _forward_marks(trace: Trace, emb: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """One host range per model forward: the root ``nn.Module`` call around
    each token embedding, else the embeddings themselves as boundaries."""
    schema = {"name": pl.String, "tid": _I64, "ts": _I64, "cpu_end": _I64}
    if emb.height == 0:
        return pl.DataFrame(schema=schema), "forward"
    py = trace.python
    if py.height:
        roots = py.filter(pl.col("name").str.starts_with("nn.Module: ") & ~pl.col("module").fill_null(".").str.contains(r"\."))
        roots = roots.select(name=pl.col("module"), root_tid=pl.col("tid").cast(_I64), root_ts="ts", cpu_end="end")
        hit = emb.sort("ts").join_asof(roots.sort("root_ts"), left_on="ts", right_on="root_ts", strategy="backward")
        hit = hit.filter((pl.col("ts") < pl.col("cpu_end")) & (pl.col("tid") == pl.col("root_tid")))
        if hit.height:
            found = hit.select("name", "tid", ts="root_ts", cpu_end="cpu_end").unique("ts", keep="first")
            return found.sort("ts").cast(schema), "model forward (root nn.Module call)"  # type: ignore[arg-type]
    # No module ranges: each token embedding starts an iteration that runs
    # until the next one (the last, until its thread's last op ends).
    e = emb.sort("ts")
    last = trace.ops.filter(pl.col("tid") == e["tid"][-1])["end"].max()
    ends = e["ts"].shift(-1).fill_null(last)
    marks = e.select(name=pl.lit(_EMBEDDING), tid="tid", ts="ts").with_columns(cpu_end=ends)
    return marks.cast(schema), "token embedding calls (one per forward)"  # type: ignore[arg-type]


def _in_ranges(times: pl.DataFrame, marks: pl.DataFrame, t: str = "ts") -> pl.DataFrame:
    """``times`` with the ``iteration`` whose host range holds column ``t`` (others dropped)."""
    ranges = marks.select("iteration", _its="ts", _ite="cpu_end").sort("_its")
    return (
        times.filter(pl.col(t).is_not_null()).sort(t)
        .join_asof(ranges, left_on=t, right_on="_its", strategy="backward")
        .filter(pl.col(t) < pl.col("_ite"))
        .drop("_its", "_ite")
    )  # fmt: skip


def _dims_of(ops: pl.DataFrame, name_regex: str, marks: pl.DataFrame, column: str = "input_dims") -> dict[int, Any]:
    """Per iteration, the input dims (or ``column``) of the first op matching ``name_regex`` in it."""
    # a capture's ops ran at the captured batch, not this one
    keep = pl.col("name").str.contains(name_regex) & ~pl.col("from_capture")
    sel = ops.filter(keep).select("ts", value=column)
    found = _in_ranges(sel, marks).sort("ts").unique("iteration", keep="first")
    read = _loads if column == "input_dims" else (lambda v: v)
    return {int(r["iteration"]): read(r["value"]) for r in found.iter_rows(named=True)}


def _packed(dims: list | None) -> tuple[int, int] | None:
    """``(N, R)`` from a varlen attention op's inputs: ``N`` query tokens
    (``[N, H, D]``) of ``R`` sequences (the first 1-D input after q, k, v:
    ``cu_seqlens_q``, ``R + 1`` offsets)."""
    if not dims or len(dims) < 4 or not isinstance(dims[0], list) or len(dims[0]) != 3:
        return None
    for d in dims[3:]:
        if isinstance(d, list) and len(d) == 1:
            return (int(dims[0][0]), int(d[0]) - 1) if d[0] > 1 else None
    return None


def _sampled_rows(ops: pl.DataFrame, marks: pl.DataFrame, vocab: dict[int, int]) -> dict[int, int]:
    """Per iteration, the rows of the first ``[R, vocab]`` tensor an op reads (the logits the sampler takes)."""
    if not vocab:
        return {}
    first = pl.col("input_dims").str.extract_groups(r"^\[\[(\d+),\s*(\d+)\]")
    sel = ops.filter((pl.col("kind").cast(pl.String) == "op") & (pl.col("name") != _EMBEDDING)).select(
        "ts", rows=first.struct.field("1").cast(_I64), cols=first.struct.field("2").cast(_I64)
    )
    wanted = pl.DataFrame({"iteration": list(vocab), "cols": list(vocab.values())}, schema={"iteration": _I64, "cols": _I64})
    found = _in_ranges(sel.drop_nulls(), marks).join(wanted, on=["iteration", "cols"]).sort("ts")
    found = found.unique("iteration", keep="first")
    return {int(i): int(r) for i, r in found.select("iteration", "rows").iter_rows()}


def _shape_labels(trace: Trace, marks: pl.DataFrame, emb: pl.DataFrame) -> pl.DataFrame:
    """Per iteration: ``shape_phase``, ``shape_basis``, ``shape_tokens``, ``shape_requests``."""
    ids = _in_ranges(emb.select("ts", "ids", "vocab"), marks).sort("ts").unique("iteration", keep="first")
    ids_of = {int(r["iteration"]): list(r["ids"]) for r in ids.iter_rows(named=True)}
    vocab = {int(r["iteration"]): int(r["vocab"]) for r in ids.iter_rows(named=True)}
    attn = _dims_of(trace.ops, _SDPA, marks)
    varlen = _dims_of(trace.ops, _VARLEN, marks)
    varlen_names = _dims_of(trace.ops, _VARLEN, marks, column="name")
    rows = _sampled_rows(trace.ops, marks, {k: v for k, v in vocab.items() if len(ids_of[k]) == 1})
    out = []
    for it in marks["iteration"].to_list():
        phase = basis = None
        tokens = requests = None
        tid = ids_of.get(it)
        if tid:
            tokens = 1
            for d in tid:
                tokens *= d
        q = attn.get(it)
        if q and len(q) >= 2 and len(q[0]) == 4 and len(q[1]) == 4:
            tq, tk, b = q[0][2], q[1][2], q[0][0]
            requests = b
            if tq == 1 and tk > 1:
                phase, basis = "decode", f"attention query {q[0]}, key {q[1]}: 1 new token a sequence, {tk} in the KV cache"
            elif tq > 1:
                phase, basis = "prefill", f"attention query {q[0]}, key {q[1]}: {tq} new tokens a sequence"
        if phase is None and tid and len(tid) == 2:
            requests = tid[0]
            phase = "decode" if tid[1] == 1 else "prefill"
            basis = f"token ids {tid}: {tid[1]} new token{'s' if tid[1] > 1 else ''} a sequence"
        packed = _packed(varlen.get(it))
        if phase is None and packed:
            (n, r), name = packed, varlen_names.get(it, "varlen attention")
            tokens, requests = tokens or n, r
            phase = "decode" if n == r else "prefill"
            basis = f"{name}: {n:,} query tokens for {r:,} sequences (cu_seqlens [{r + 1}])" + (
                ": one a sequence" if n == r else ": more than one a sequence (mixed batches look the same)"
            )
        if phase is None and tid and len(tid) == 1 and it in rows:
            requests = rows[it]
            n, r = tid[0], rows[it]
            phase = "decode" if n == r else "prefill" if n > r else None
            basis = f"{n:,} token ids for {r:,} sampled rows" + (
                ": one a sequence" if n == r else ": more than one a sequence (mixed batches look the same)"
            )
        out.append({"iteration": it, "shape_phase": phase, "shape_basis": basis, "shape_tokens": tokens, "shape_requests": requests})
    return pl.DataFrame(
        out, schema={"iteration": _I64, "shape_phase": pl.String, "shape_basis": pl.String,
                     "shape_tokens": _I64, "shape_requests": _I64},
    )  # fmt: skip


def _engine_rows(marks: pl.DataFrame) -> pl.DataFrame:
    """Counts and labels from the annotations (the most detailed of nested ones)."""
    out = []
    for r in marks.iter_rows(named=True):
        # Nested annotations (SGLang's own step[...] inside an execute_...
        # range): the innermost names the engine; counts it lacks come from
        # the others; the basis quotes them all.
        parsed = [p for p in (engine_annotations.parse(n) for n in r["names"]) if p is not None][::-1]
        best = parsed[0]
        counts = {k: next((getattr(p, k) for p in parsed if getattr(p, k) is not None), None) for k in _COUNTS}
        phase = next((p.phase for p in parsed if p.phase), None)
        phase = phase or engine_annotations.phase_of(counts["prefill_requests"], counts["decode_requests"])
        basis = "; ".join(dict.fromkeys(p.basis for p in parsed))
        out.append({"iteration": r["iteration"], "engine": best.engine, "phase": phase, "basis": basis, **counts})
    return pl.DataFrame(
        out, schema={"iteration": _I64, "engine": pl.String, "phase": pl.String, "basis": pl.String,
                     **{k: _I64 for k in _COUNTS}},
    )  # fmt: skip


_COUNTS = ("tokens", "prefill_tokens", "decode_tokens", "requests", "prefill_requests", "decode_requests")


#: Per-phase counts, filled from the totals where only the shapes label an iteration.
_SPLIT = ("prefill_tokens", "decode_tokens", "prefill_requests", "decode_requests")


def _by_phase(column: str, total: str) -> pl.Expr:
    """``column`` (``prefill_tokens``, ...), or where unknown and the iteration is all
    prefill or all decode, its ``total`` for that phase and 0 for the other."""
    phase = column.split("_")[0]
    known = pl.col("phase").is_in(["prefill", "decode"])
    filled = pl.when(pl.col("phase") == phase).then(pl.col(total)).otherwise(0)
    return pl.col(column).fill_null(pl.when(known).then(filled))


def _empty() -> pl.DataFrame:
    schema = {
        "iteration": _I64, "phase": pl.String, "basis": pl.String, "source": pl.String, "name": pl.String,
        "ts": _I64, "cpu_end": _I64, "start": _I64, "end": _I64, "dur": _I64, "first_gpu": _I64, "gpu_end": _I64,
        "gpu_work": pl.UInt32, **{k: _I64 for k in _COUNTS}, "tokens_per_s": pl.Float64,
        **{c: _I64 for c in COLUMNS},
    }  # fmt: skip
    return pl.DataFrame(schema=schema)


def _marks(trace: Trace) -> tuple[pl.DataFrame, str, pl.DataFrame]:
    """Host ranges of the iterations (numbered ``iteration``), where they come from, and the token embeddings."""
    emb = _token_embeddings(trace)
    marks = _annotation_marks(trace)
    source = "engine"
    if marks.height == 0:
        marks, source = _forward_marks(trace, emb)
    return marks.sort("ts").with_row_index("iteration").with_columns(pl.col("iteration").cast(_I64)), source, emb


@per_trace
def iterations(trace: Trace) -> pl.DataFrame:
    """One row per engine iteration, in time order; empty when none is found.

    Columns: ``iteration`` (0, 1, ...); ``phase`` (``prefill``, ``decode``,
    ``mixed`` or ``unknown``) and ``basis`` (how it was decided, in words);
    ``source`` (``engine`` annotations, or the ``forward`` calls found from
    shapes) and ``name`` (the annotation, or the root module); ``ts``,
    ``cpu_end`` (host range), ``start``, ``end``, ``dur`` (the window, ns),
    ``first_gpu``, ``gpu_end`` (its GPU work's first start and last end),
    ``gpu_work`` (GPU activities it launched); ``tokens``,
    ``prefill_tokens``, ``decode_tokens``, ``requests``,
    ``prefill_requests``, ``decode_requests`` (null where the trace does
    not say); ``tokens_per_s`` (tokens over ``dur``); and nanoseconds per
    step-breakdown category (``kernel`` ... ``other``, ``total`` = ``dur``).
    """
    marks, source, emb = _marks(trace)
    if marks.height == 0:
        return _component_iterations(trace)
    shapes = _shape_labels(trace, marks, emb)
    if source == "engine":
        rows = _engine_rows(marks).join(shapes, on="iteration", how="left")
        # The shapes' verdict is quoted beside the annotation's (and decides where it names no phase).
        said = (
            pl.when(pl.col("phase").is_null()).then(pl.lit("; shapes: "))
            .when(pl.col("phase") == pl.col("shape_phase")).then(pl.lit("; shapes agree: "))
            .otherwise(pl.lit("; shapes say ") + pl.col("shape_phase") + ": ")
        )  # fmt: skip
        rows = rows.with_columns(
            pl.col("phase").fill_null(pl.col("shape_phase")),
            basis=pl.when(pl.col("shape_phase").is_not_null())
            .then(pl.col("basis") + said + pl.col("shape_basis"))
            .otherwise(pl.col("basis")),
            tokens=pl.col("tokens").fill_null(pl.col("shape_tokens")),
            requests=pl.col("requests").fill_null(pl.col("shape_requests")),
        ).with_columns(source=pl.lit("engine: ") + pl.col("engine"))
        rows = rows.with_columns(_by_phase(c, c.split("_")[1]).alias(c) for c in _SPLIT)
        drop_ops = pl.Series([i for inner in marks["inner"].to_list() for i in inner], dtype=_I64)
    else:
        rows = shapes.with_columns(
            phase="shape_phase", basis="shape_basis", tokens="shape_tokens", requests="shape_requests",
            source=pl.lit(f"forward: {source}"), **{c: pl.lit(None, _I64) for c in _SPLIT},
        )  # fmt: skip
        rows = rows.with_columns(_by_phase(c, c.split("_")[1]).alias(c) for c in _SPLIT)
        if not (rows["phase"] == "decode").any():
            # Forward passes with no decode (an encoder, a text encoder in a
            # diffusion pipeline, one prefill) are no evidence of LLM phases.
            return _component_iterations(trace)
        drop_ops = pl.Series([], dtype=_I64)
    return _iteration_table(trace, marks, rows, drop_ops)


def _iteration_table(trace: Trace, marks: pl.DataFrame, rows: pl.DataFrame, drop_ops: pl.Series) -> pl.DataFrame:
    """The iterations' windows and breakdown, joined to their labels ``rows``."""
    windows = host_range_windows(marks.select(step="iteration", ts="ts", cpu_end="cpu_end"), trace.kernels)
    # The iteration ranges are the iterations, not CPU work (as ProfilerStep#N ranges).
    busy = category_intervals(dataclasses.replace(trace, ops=trace.ops.filter(~pl.col("op_id").is_in(drop_ops.implode()))))
    parts = breakdown(busy, windows.select("step", "start", "end")).drop("step")
    table = (
        windows.rename({"step": "iteration"}).with_columns(name=marks.sort("ts")["name"])
        .hstack(parts)
        .join(rows, on="iteration", how="left")
        .with_columns(
            pl.col("phase").fill_null("unknown"),
            pl.col("basis").fill_null("no annotation or shape says"),
            tokens_per_s=pl.when(pl.col("dur") > 0).then(pl.col("tokens") / (pl.col("dur") / 1e9)),
        )
    )  # fmt: skip
    return table.select(_empty().columns).cast(_empty().schema)  # type: ignore[arg-type]


#: How a component iteration's phase was decided, in words.
_COMPONENT_BASIS = (
    "a forward-only inference trace with no engine annotation and no decode step: "
    "each call of a root nn.Module is an iteration, labelled by its module"
)


def _component_iterations(trace: Trace) -> pl.DataFrame:
    """Iterations of an inference program that is not an LLM engine (a
    diffusion pipeline: text encoders, the denoiser's steps, the image
    decoder): each call of a root ``nn.Module``, its phase the module's
    class, so no prefill or decode is invented.  Only where something else
    says the trace is inference (KV-cache ops, graph replays) and it ran no
    backward or optimizer op; empty otherwise."""
    py = trace.python
    if _training(trace) or py.height == 0 or not _other_evidence(trace):
        return _empty()
    roots = py.filter(pl.col("name").str.starts_with("nn.Module: ") & ~pl.col("module").fill_null(".").str.contains(r"\."))
    if roots.height == 0:
        return _empty()
    marks = (
        roots.sort("ts").select(name=pl.col("module"), tid=pl.col("tid").cast(_I64), ts="ts", cpu_end="end")
        .with_row_index("iteration").with_columns(pl.col("iteration").cast(_I64))
    )  # fmt: skip
    rows = marks.select(
        "iteration",
        phase=pl.col("name").str.replace(r"_\d+$", ""),
        basis=pl.lit(_COMPONENT_BASIS),
        source=pl.lit(COMPONENT_SOURCE),
        **{k: pl.lit(None, _I64) for k in _COUNTS},
    )
    return _iteration_table(trace, marks, rows, pl.Series([], dtype=_I64))


def phase_summary(its: pl.DataFrame) -> pl.DataFrame:
    """One row per phase present (prefill, decode, mixed, unknown): ``iterations``,
    ``time`` and ``mean`` (ns), ``tokens`` (null when no iteration says),
    ``tokens_per_s`` (over the time of the iterations that count tokens), and
    the mean nanoseconds per breakdown category."""
    if its.height == 0:
        return pl.DataFrame(schema={"phase": pl.String, "iterations": pl.UInt32, "time": _I64, "mean": pl.Float64,
                                    "tokens": _I64, "tokens_per_s": pl.Float64, **{c: pl.Float64 for c in COLUMNS}})  # fmt: skip
    counted = pl.col("tokens").is_not_null()
    order = pl.col("phase").replace_strict({p: i for i, p in enumerate(PHASES)}, default=len(PHASES))
    return (
        its.group_by("phase")
        .agg(
            iterations=pl.len(),
            time=pl.col("dur").sum(),
            mean=pl.col("dur").mean(),
            tokens=pl.when(counted.any()).then(pl.col("tokens").sum()),
            _counted_ns=pl.col("dur").filter(counted).sum(),
            _first=pl.col("iteration").min(),
            **{c: pl.col(c).cast(pl.Float64).mean() for c in COLUMNS},
        )
        .with_columns(tokens_per_s=pl.when(pl.col("_counted_ns") > 0).then(pl.col("tokens") / (pl.col("_counted_ns") / 1e9)))
        .sort(order, "_first")  # LLM phases in their order, other components as they first ran
        .select("phase", "iterations", "time", "mean", "tokens", "tokens_per_s", *COLUMNS)
    )


def _phase_view(trace: Trace, its: pl.DataFrame) -> tuple[Trace, dict[str, int]]:
    """``trace`` with its phases as steps: each iteration a window whose
    ``step`` is its phase's code, and every op and GPU activity of an
    iteration in that step.  ``op_stats(view, step=code)`` is then the op
    or kernel table of one phase, shares of that phase's time."""
    codes = {p: i for i, p in enumerate(dict.fromkeys(its["phase"].to_list()))}
    marks = its.select("iteration", "ts", "cpu_end", code=pl.col("phase").replace_strict(codes, return_dtype=_I64))
    code_of = marks.select("iteration", "code")
    ops = trace.ops.with_row_index("_r")
    op_step = _in_ranges(ops.select("_r", "ts"), marks.drop("code")).join(code_of, on="iteration").select("_r", "code")
    ops = ops.join(op_step, on="_r", how="left", maintain_order="left").with_columns(step=pl.col("code")).drop("_r", "code")
    k = trace.kernels.with_row_index("_r")
    k_step = _in_ranges(k.select("_r", "launch_ts"), marks.drop("code"), "launch_ts").join(code_of, on="iteration")
    k = k.join(k_step.select("_r", "code"), on="_r", how="left", maintain_order="left")
    k = k.with_columns(step=pl.col("code")).drop("_r", "code")
    steps = its.select(step=pl.col("phase").replace_strict(codes, return_dtype=_I64), ts="ts", start="start", end="end")
    return dataclasses.replace(trace, ops=ops, kernels=k, steps=steps), codes


def phase_tables(trace: Trace, its: pl.DataFrame | None = None, *, by: str = "kernel") -> pl.DataFrame:
    """The op (``by="op"``) or kernel (``by="kernel"``) table of each phase,
    stacked with a leading ``phase`` column: :func:`kinetolens.analysis.workload.ops.op_stats`
    over that phase's iterations, ``step_share_pct`` of their time."""
    from kinetolens.analysis.workload.ops import op_stats, rank_basis

    its = iterations(trace) if its is None else its
    if its.height == 0:
        return pl.DataFrame()
    view, codes = _phase_view(trace, its)
    order = "device_total_us" if by == "kernel" else rank_basis(trace, by)
    parts = [
        op_stats(view, by=by, step=code).sort(order, descending=True, nulls_last=True).select(pl.lit(phase).alias("phase"), pl.all())
        for phase, code in codes.items()
    ]
    return pl.concat(parts, how="diagonal_relaxed")


@per_trace
def detect(trace: Trace) -> Detection:
    """Whether ``trace`` records inference (see the module docstring), with the evidence
    (once per trace: the trace's kind and the summary's inference block both ask)."""
    against = _training(trace)
    evidence: list[str] = []
    names = trace.ops.filter(pl.col("name").str.contains(engine_annotations.CANDIDATE))["name"]
    engines = sorted({p.basis.split(":")[0] for p in (engine_annotations.parse(n) for n in names.unique().to_list()) if p})
    if engines:
        evidence.append(f"engine iteration annotations ({', '.join(engines)})")
    if not engines and against is None:
        if (iterations(trace)["phase"] == "decode").any():
            evidence.append("decode iterations (one new token a sequence) from shapes")
    evidence += _other_evidence(trace)
    return Detection(inference=bool(evidence) and against is None, evidence=tuple(evidence), against=against)


def _other_evidence(trace: Trace) -> list[str]:
    """What says inference besides iterations: paged KV-cache ops, graph replays."""
    evidence = []
    kv = trace.ops.filter(pl.col("name").str.contains(KV_CACHE_OPS))["name"]
    if kv.len():
        evidence.append(f"KV-cache ops ({kv[0]})")
    if trace.kernels["graph_id"].null_count() < trace.kernels.height:
        evidence.append("CUDA/HIP graph replays")
    return evidence


def inference_block(trace: Trace) -> InferenceBlock:
    """The ``inference`` block of ``kinetolens summary --json`` (docs/inference.md)."""
    its = _empty() if _training(trace) else iterations(trace)
    found = detect(trace)
    its = its if found.inference else _empty()

    def us(v: Any) -> Any:
        return None if v is None else float(v) / 1000.0

    rows = tuple(
        Iteration(
            iteration=r["iteration"], phase=r["phase"], basis=r["basis"], source=r["source"], name=r["name"],
            dur_us=us(r["dur"]), gpu_busy_span_us=us(r["gpu_end"] - r["first_gpu"]) if r["gpu_end"] is not None else None,
            **{k: r[k] for k in _COUNTS}, tokens_per_s=r["tokens_per_s"], breakdown_us=StepTimes.from_ns(r),
        )
        for r in its.iter_rows(named=True)
    )  # fmt: skip
    phases = tuple(
        Phase(phase=r["phase"], iterations=r["iterations"], time_us=us(r["time"]), mean_us=us(r["mean"]),
              tokens=r["tokens"], tokens_per_s=r["tokens_per_s"], average_us=StepTimes.from_ns(r))
        for r in phase_summary(its).iter_rows(named=True)
    )  # fmt: skip
    counted = [r for r in rows if r.tokens is not None]
    tokens = sum(r.tokens or 0 for r in counted) if counted else None
    counted_us = sum(r.dur_us for r in counted)
    return InferenceBlock(
        detected=found.inference,
        evidence=tuple(found.evidence),
        against=found.against,
        iterations=rows,
        phases=phases,
        # over the iterations that count tokens, as each phase's tokens_per_s
        tokens=tokens,
        tokens_time_us=counted_us if counted else None,
        tokens_per_s=tokens / (counted_us / 1e6) if tokens is not None and counted_us > 0 else None,
    )
