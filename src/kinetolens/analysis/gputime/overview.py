"""Step-time breakdown: where each step's wall time went.

Every instant of a step is given to exactly one category, the first of
Kernel > Memcpy > Memset > Communication > Runtime > DataLoader > CPU Exec
that is busy then; instants where none is busy are Other.  So the parts of
a step add up to its wall time, and time the GPU hides (a kernel running
while the host launches the next) is counted once, as the higher category.
These are torch-tb-profiler's Overview rules; kinetolens reads communication
more widely (every collective's host range and kernel, by the one rule of
:mod:`kinetolens.model.vocabulary` that ``dist`` uses too), see
:func:`category_intervals`.

Steps are the disjoint windows of ``trace.steps`` (see
:mod:`kinetolens.model.steps`): a step starts when its host range starts or
when the previous step's GPU work ends, whichever is later, and ends when
its own GPU work ends.  Every step gets a row, a last step the profiler cut
short too (it is real time); means leave it out (:func:`average_breakdown`
of :func:`complete_rows`), as torch-tb-profiler drops it.  A trace without
``ProfilerStep#N`` ranges gets one window (``step`` null): its host ops'
span extended over the GPU work they launched.

The breakdown is a sweep over sorted interval end points with one running
count per category (numpy cumulative sums), so it is O(n log n) in the
number of events with no Python loop per event.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import polars as pl

from kinetolens.analysis.session import per_trace
from kinetolens.model.trace import Trace
from kinetolens.model.vocabulary import (
    GPU_ACTIVITY,
    OTHER,
    STEP_CATEGORIES,
    STEP_COLUMNS,
    STEP_PREFIX,
    is_comm_kernel,
    is_comm_op,
    is_dataloader,
)

#: Busy categories in priority order; ``other`` is every instant none covers.
CATEGORIES: tuple[str, ...] = STEP_CATEGORIES
COLUMNS: tuple[str, ...] = STEP_COLUMNS

_WINDOW_SCHEMA = {"step": pl.Int64, "start": pl.Int64, "end": pl.Int64}


@per_trace
def step_windows(trace: Trace) -> pl.DataFrame:
    """Disjoint [start, end) wall-time windows, one per step (ns).

    The steps' own windows (:mod:`kinetolens.model.steps`, the one
    definition of a step's time); without steps, one whole-trace window.
    """
    steps = trace.steps
    if steps.height == 0:
        return _whole_trace_window(trace)
    return steps.sort("ts").select("step", "start", "end").cast(_WINDOW_SCHEMA)


def _launched(kernels: pl.DataFrame) -> pl.DataFrame:
    return kernels.filter(pl.col("kind").cast(pl.String).is_in(GPU_ACTIVITY) & (pl.col("dur") >= 0))


def _whole_trace_window(trace: Trace) -> pl.DataFrame:
    """No profiler steps: the host ops' span, extended over the GPU work they
    launched (falling back to every host event, then to the GPU activity)."""
    ops = trace.ops.filter(pl.col("kind").cast(pl.String) == "op")
    host = [t for t in (ops,) if t.height] or [t for t in (trace.ops, trace.runtime) if t.height]
    gpu = _launched(trace.kernels)
    if host:
        start = min(int(t["ts"].min()) for t in host)  # type: ignore[arg-type]
        end = max(int((t["ts"] + t["dur"]).max()) for t in host)  # type: ignore[arg-type]
        if gpu.height:
            inside = gpu.filter((pl.col("launch_ts") >= start) & (pl.col("launch_ts") < end))
            if inside.height:
                end = max(end, int((inside["ts"] + inside["dur"]).max()))  # type: ignore[arg-type]
    elif gpu.height:
        start = int(gpu["ts"].min())  # type: ignore[arg-type]
        end = int((gpu["ts"] + gpu["dur"]).max())  # type: ignore[arg-type]
    else:
        return pl.DataFrame(schema=_WINDOW_SCHEMA)
    return pl.DataFrame({"step": [None], "start": [start], "end": [end]}, schema=_WINDOW_SCHEMA)


def category_intervals(trace: Trace) -> pl.DataFrame:
    """Busy intervals (``cat`` = index into :data:`CATEGORIES`, start, end; ns).

    * kernel / memcpy / memset: GPU activity on any device; communication
      kernels (:func:`~kinetolens.model.vocabulary.is_comm_kernel`: NCCL by
      name, or launched by a collective's range) are communication instead.
    * communication: also the host ranges of collective calls
      (:func:`~kinetolens.model.vocabulary.is_comm_op`: ``nccl:*``,
      ``gloo:*``, ``c10d::*``, ``record_param_comms``).
    * runtime: CUDA (and other accelerator) runtime and driver calls.  GPU-side
      ``cuda_sync`` waits are not host work and count nowhere.
    * dataloader: ``enumerate(DataLoader)#...__next__`` / ``enumerate(DataPipe)#``
      ops or annotations.
    * cpu_exec: every other op and user annotation, except the
      ``ProfilerStep#N`` ranges themselves (they are the steps).
    """
    idx = {name: i for i, name in enumerate(CATEGORIES)}
    # Each table cut to the columns read before filtering: a filter copies
    # every column it keeps, and the model tables are wide.
    k = _launched(trace.kernels.select("kind", "name", "op", "ts", "dur"))
    kind = pl.col("kind").cast(pl.String)
    comm_kernel = is_comm_kernel(k)
    gpu_cat = (
        pl.when(kind == "memcpy")
        .then(idx["memcpy"])
        .when(kind == "memset")
        .then(idx["memset"])
        .when(comm_kernel)
        .then(idx["communication"])
        .otherwise(idx["kernel"])
    )
    gpu = k.select(cat=gpu_cat, start="ts", end=pl.col("ts") + pl.col("dur"))

    rt = trace.runtime.select("kind", "ts", "dur").filter(pl.col("kind").cast(pl.String) == "runtime")
    runtime = rt.select(cat=pl.lit(idx["runtime"]), start="ts", end=pl.col("ts") + pl.col("dur"))

    name = pl.col("name")
    host_ops = trace.ops.select("kind", "name", "ts", "dur").filter(
        pl.col("kind").cast(pl.String).is_in(("op", "annotation")) & ~name.str.starts_with(STEP_PREFIX)
    )
    host_cat = (
        pl.when(is_comm_op(name))
        .then(idx["communication"])
        .when(is_dataloader(name))
        .then(idx["dataloader"])
        .otherwise(idx["cpu_exec"])
    )
    host = host_ops.select(cat=host_cat, start="ts", end=pl.col("ts") + pl.col("dur"))

    parts = [p.cast({"cat": pl.Int8, "start": pl.Int64, "end": pl.Int64}) for p in (gpu, runtime, host)]
    return pl.concat(parts).filter(pl.col("end") > pl.col("start"))


#: Intervals one pass of the sweep takes at most: a longer trace is swept
#: a run of steps at a time, so that its working memory (about 50 bytes per
#: interval) does not grow with the trace.
SWEEP_CHUNK = 1_000_000


def _sweep(intervals: pl.DataFrame, windows: pl.DataFrame) -> np.ndarray:
    """Nanoseconds per window (rows, in ``windows`` order) and category
    (columns: :data:`CATEGORIES`, then other): each instant of a window goes
    to the first category busy then, and belongs to the window that starts
    last at or before it (up to that window's end).

    Windows are swept in runs of consecutive ones holding about
    :data:`SWEEP_CHUNK` intervals between them: each window owns the
    instants from its start to the next one's, so a run needs only the
    intervals that overlap it."""
    w_start = windows["start"].to_numpy().astype(np.int64)
    w_end = windows["end"].to_numpy().astype(np.int64)
    sums = np.zeros((w_start.size, len(CATEGORIES) + 1), dtype=np.int64)
    keep = np.flatnonzero(w_end > w_start)
    by_start = keep[np.argsort(w_start[keep], kind="stable")]
    owned_end = np.minimum(w_end[by_start], np.append(w_start[by_start][1:], np.iinfo(np.int64).max))
    runs = min(max(1, -(-intervals.height // SWEEP_CHUNK)), by_start.size)
    for run in np.array_split(np.arange(by_start.size), runs) if runs else ():
        rows = by_start[run]
        start, end = w_start[rows], owned_end[run]
        lo, hi = int(start.min()), int(end.max())
        busy = intervals.filter((pl.col("end") > lo) & (pl.col("start") < hi))
        sums[rows] = _sweep_run(busy, start, end)
    return sums


def _sweep_run(intervals: pl.DataFrame, w_start: np.ndarray, w_end: np.ndarray) -> np.ndarray:
    """:func:`_sweep` over one run of windows (``w_start``, ``w_end``).

    Numpy over the sorted end points: one running count per category in
    turn (a cumulative sum of +1 at starts and -1 at ends), folded into the
    winning category at once, so that at most one count exists at a time.
    Polars queries of the same sweep held every category's column and the
    sort's copies together: 240 MiB for a 500 MB trace's 1.4 million
    intervals, where this takes about a third of that."""
    other = len(CATEGORIES)
    sums = np.zeros((w_start.size, other + 1), dtype=np.int64)
    n = intervals.height
    t = np.concatenate([intervals["start"].to_numpy(), intervals["end"].to_numpy(), w_start, w_end]).astype(np.int64, copy=False)
    order = np.argsort(t, kind="stable")
    t = t[order]
    cats = intervals["cat"].to_numpy().astype(np.int8, copy=False)
    cat = np.concatenate([cats, cats, np.full(2 * w_start.size, -1, np.int8)])[order]
    step = np.concatenate([np.ones(n, np.int8), np.full(n, -1, np.int8), np.zeros(2 * w_start.size, np.int8)])[order]
    del order, cats
    winner = np.full(t.size, other, dtype=np.int8)
    for i in reversed(range(other)):  # the lowest busy category wins: assigned last
        winner[np.cumsum(np.where(cat == i, step, np.int8(0)), dtype=np.int32) > 0] = i
    del cat, step
    # The state after the last end point at each time holds until the next time.
    last = np.flatnonzero(np.append(t[1:] != t[:-1], True))
    at, won = t[last], winner[last]
    del t, winner, last
    ns, at, won = np.diff(at), at[:-1], won[:-1]
    # A window holds the segments from its start up to the next window's start
    # (the one that starts last at or before a segment), those before its end:
    # one contiguous run of the sorted segments per window.
    keep = np.flatnonzero(w_end > w_start)
    by_start = keep[np.argsort(w_start[keep], kind="stable")]
    lo = np.searchsorted(at, w_start[by_start], side="left")
    hi = np.minimum(np.append(lo[1:], at.size), np.searchsorted(at, w_end[by_start], side="left"))
    hi = np.maximum(hi, lo)
    running = np.zeros(at.size + 1, dtype=np.int64)
    for c in range(other + 1):
        np.cumsum(np.where(won == c, ns, 0), out=running[1:])
        sums[by_start, c] = running[hi] - running[lo]
    return sums


@per_trace
def step_breakdown(trace: Trace) -> pl.DataFrame:
    """One row per step: ``step`` and nanoseconds per category, plus ``total``
    and ``complete`` (false for a last step the profiler cut short).

    ``kernel + memcpy + ... + other == total``, the step's wall time.
    """
    table = breakdown(category_intervals(trace), step_windows(trace))
    complete = trace.steps.select("step", "complete")
    if table.height == 0 or table["step"].null_count() == table.height:
        return table.with_columns(complete=pl.lit(True))
    return table.join(complete, on="step", how="left", maintain_order="left").with_columns(
        pl.col("complete").fill_null(True)
    )


def windowed_breakdown(windows: Iterable[tuple[int, Trace]]) -> pl.DataFrame:
    """:func:`step_breakdown` of a trace loaded one step at a time
    (:mod:`kinetolens.windowed`): each window's ``(step, trace)`` gives its
    own step's row; the steps beside it in its trace are partial and left out.
    Each trace can be dropped once its row is taken."""
    rows = [step_row(trace, step) for step, trace in windows]
    schema = {"step": pl.Int64, **{c: pl.Int64 for c in COLUMNS}, "complete": pl.Boolean}
    return pl.concat(rows) if rows else pl.DataFrame(schema=schema)


def step_row(trace: Trace, step: int) -> pl.DataFrame:
    """``step``'s row of the step breakdown of a window's ``trace``."""
    return step_breakdown(trace).filter(pl.col("step") == step)


def complete_rows(breakdown: pl.DataFrame) -> pl.DataFrame:
    """The rows of whole steps (every row when nothing marks one incomplete)."""
    return breakdown.filter(pl.col("complete")) if "complete" in breakdown.columns else breakdown


def breakdown(intervals: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The priority sweep of ``intervals`` (cat, start, end) over ``windows``
    (step, start, end): one row per window, nanoseconds per category."""
    schema = {"step": pl.Int64, **{c: pl.Int64 for c in COLUMNS}}
    if windows.height == 0:
        return pl.DataFrame(schema=schema)
    sums = _sweep(intervals, windows)
    parts = {c: sums[:, i] for i, c in enumerate((*CATEGORIES, OTHER))}
    return windows.select("step", total=pl.col("end") - pl.col("start")).with_columns(
        **{c: pl.Series(v) for c, v in parts.items()}
    ).select("step", *CATEGORIES, OTHER, "total").cast(schema)


def average_breakdown(breakdown: pl.DataFrame) -> dict[str, float]:
    """Mean nanoseconds per category over the whole steps of a breakdown (a
    last step cut short is left out; see :func:`complete_rows`)."""
    breakdown = complete_rows(breakdown) if complete_rows(breakdown).height else breakdown
    if breakdown.height == 0:
        return {c: 0.0 for c in COLUMNS}
    means = breakdown.select([pl.col(c).cast(pl.Float64).mean() for c in COLUMNS]).row(0, named=True)
    return {c: float(v) for c, v in means.items()}
