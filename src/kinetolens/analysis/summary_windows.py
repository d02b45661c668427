"""The summary of a trace read one step window at a time (:mod:`kinetolens.windowed`).

Every figure that is a sum over the trace is added up from each window's
own part: the step's breakdown row, kernel time and how much of it has an
op, module or source line, event counts, GPU busy, SM-busy and Tensor Core
time.  A window owns the events that start between its step's start and the
next step's (the first window everything before, the last everything
after), so each event counts once, while the window itself holds the
context its step needs (the previous step's launches, the next step's
start).  Peak memory is taken from the allocator events alone.

What is not a sum (the program's kind, the recommendations and their
simulated savings) comes from a sample: a run of consecutive whole steps in
the middle of the trace, loaded as one window; ``read_in_windows`` names it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import reduce
from operator import add

import polars as pl

from kinetolens.analysis.advice.recommendations import damaged_inputs
from kinetolens.analysis.attribution_shares import (
    AttributionParts,
    UnrecordedParts,
    attribution_parts,
    unrecorded_parts,
)
from kinetolens.analysis.gputime.overview import step_breakdown, step_row
from kinetolens.analysis.hardware.gpu_metrics import (
    PARTS_SCHEMA,
    added_parts,
    figures,
    gpu_peaks,
    gpu_table,
    gpu_time_parts,
    steps_span,
)
from kinetolens.analysis.session import warnings_of
from kinetolens.analysis.summary import event_counts, memory_block_of, program_fields, span_of, steps_of
from kinetolens.analysis.summary_types import Events, GpuUse, LoadWarning, Summary, rows_of
from kinetolens.errors import TraceWarning
from kinetolens.model.ownership import owned_kernels
from kinetolens.model.trace import Trace

#: What a warning the model raised in every window says about its count.
PER_WINDOW = "; counted in each step's window, so a range at a window's edge may count twice"


@dataclass(frozen=True)
class WindowPart:
    """What one window adds to the summary (its own events only)."""

    step: int
    breakdown: pl.DataFrame
    attribution: AttributionParts
    unrecorded: UnrecordedParts
    gpu: pl.DataFrame
    events: Counter[str]
    devices_used: frozenset[int]
    span: tuple[int, int] | None
    has_ops: bool
    #: Warnings the model raised building the window: (kind, detail) -> count.
    warnings: Counter[tuple[str, str]]


def window_part(step: int, trace: Trace, own: tuple[int, int], metrics_span: tuple[int, int], reader: list[TraceWarning]) -> WindowPart:
    """``trace`` (the window of ``step``) reduced to its part: the events
    starting in ``own`` ([lo, hi) ns; GPU activities launched then,
    :func:`~kinetolens.model.ownership.owned_kernels`), GPU time in
    ``own`` within the steps' span ``metrics_span``; ``reader``: the file's
    warnings, which every window repeats."""
    lo, hi = own
    owned = (pl.col("ts") >= lo) & (pl.col("ts") < hi)
    kernels = owned_kernels(lo, hi)
    span_lo, span_hi = max(lo, metrics_span[0]), min(hi, metrics_span[1])
    return WindowPart(
        step=step,
        breakdown=step_row(trace, step),
        attribution=attribution_parts(trace, kernels),
        unrecorded=unrecorded_parts(trace, kernels),
        gpu=gpu_time_parts(trace, span_lo, span_hi, kernels),
        events=Counter(vars(event_counts(trace, owned, kernels))),
        devices_used=frozenset(int(d) for d in trace.kernels["device"].drop_nulls().unique().to_list()),
        span=span_of(trace),
        has_ops=trace.ops.height > 0,
        warnings=Counter({(w.kind, w.detail): w.count for w in trace.warnings if w not in reader}),
    )


def summarize_windows(
    parts: Iterable[WindowPart],
    *,
    steps: pl.DataFrame,
    peaks: pl.DataFrame,
    sample: Trace,
    sampled: str,
    reader: list[TraceWarning],
) -> Summary:
    """The :class:`Summary` of a trace from its windows' parts (in time order),
    its steps table, its memory peaks (:func:`~kinetolens.analysis.memory.usage.peaks_of`),
    a sample window of whole steps and the file's warnings; ``sampled`` says what the sample is."""
    held = list(parts)
    table = pl.concat([p.breakdown for p in held]) if held else step_breakdown(sample).clear()
    metrics = steps_span(steps) if steps.height else (0, 0)
    gpu = added_parts(pl.concat([p.gpu for p in held])) if held else pl.DataFrame(schema=PARTS_SCHEMA)
    spans = [p.span for p in held if p.span is not None]
    events = reduce(add, (p.events for p in held), Counter())
    model_warnings = reduce(add, (p.warnings for p in held), Counter())
    analysis_warnings = [w for w in warnings_of(sample) if w not in sample.warnings]
    warnings = [
        *reader,
        *(TraceWarning(kind, n, detail + PER_WINDOW) for (kind, detail), n in model_warnings.items()),
        *analysis_warnings,
    ]
    return Summary(
        **program_fields(sample),
        devices_used=tuple(sorted(set().union(*(p.devices_used for p in held)))),
        span_us=(max(e for _, e in spans) - min(s for s, _ in spans)) / 1000.0 if spans else 0.0,
        steps=steps_of(steps, table, damaged=damaged_inputs(sample) is not None),
        gpu=rows_of(GpuUse, gpu_table(figures(gpu, *metrics), gpu_peaks(peaks), sample.devices).to_dicts()),
        events=Events(**{name: int(events.get(name, 0)) for name in Events.__dataclass_fields__}),
        memory=memory_block_of(peaks),
        attribution=reduce(add, (p.attribution for p in held), AttributionParts()).attribution(any(p.has_ops for p in held)),
        unrecorded_launches=reduce(add, (p.unrecorded for p in held), UnrecordedParts()).launches(),
        warnings=tuple(LoadWarning(kind=w.kind, count=w.count, detail=w.detail) for w in warnings),
        read_in_windows=sampled,
    )
