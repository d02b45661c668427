"""Profiler steps: ``ProfilerStep#N`` ranges, as disjoint windows over their GPU work.

This module holds the one definition of a step that every view uses:

* ``ts`` / ``cpu_end``: the ``ProfilerStep#N`` range on the host.
* ``gpu_end``: the end of the last GPU activity launched inside that range.
* ``start`` / ``end`` / ``dur``: the step's *time*, a window on the timeline.
  A step ends when its own work ends (the later of ``cpu_end`` and
  ``gpu_end``, as torch-tb-profiler does), and starts when its host range
  starts or when the previous step's work ends, whichever is later; the
  first step starts no earlier than the end of GPU work queued before the
  profiled steps that drains before the first step's own GPU work begins.
  So steps never overlap: GPU work running a step behind the host (the host
  queues step N+1 while the GPU still runs step N) counts in one step only,
  and steady-state step time is the time between two steps' ends.
* ``gpu_work`` / ``host_work``: GPU activities launched and host ops run in
  the host range.
* ``complete``: false for a last step the profiler cut short, with the
  evidence in ``cut_reason`` (:func:`incomplete_last_step`); means and
  per-rank comparisons leave it out (:func:`complete_steps`).

On the H100 Qwen trace the one step's host range is 47.15 ms, but it opens
with a 14.1 ms ``cudaDeviceSynchronize`` waiting for the previous (unprofiled)
step's kernels; its own work runs in a 35.18 ms window, its ``dur``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

import polars as pl

from kinetolens.model.vocabulary import COMM_LIBRARY_PREFIXES, GPU_ACTIVITY, STEP_PREFIX, is_comm_op

if TYPE_CHECKING:
    from kinetolens.model.trace import Trace

#: A last step is cut short when its work (GPU activities it launched, or host
#: ops where no step launched any) is below this share of the median of the
#: other steps' work.  torch-tb-profiler drops a last step under 80% of the
#: previous step's GPU activities for the same reason.
COMPLETE_WORK_SHARE = 0.8

_NEVER = -(2**62)


def _step_of(times: pl.DataFrame, marks: pl.DataFrame, t: str) -> pl.DataFrame:
    """``times`` (column ``t``) with the step whose host range holds each time, or dropped."""
    return (
        times.sort(t)
        .join_asof(marks.select("step", step_ts="ts", step_cpu_end="cpu_end").sort("step_ts"), left_on=t,
                   right_on="step_ts", strategy="backward")
        .filter(pl.col(t) < pl.col("step_cpu_end"))
    )


def build_steps(ops: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """One row per ``ProfilerStep#N`` range: see the module docstring for the columns."""
    marks = step_marks(ops)
    if marks.height == 0:
        return _no_steps(marks)
    host_work, counts = host_work_of(ops, marks)
    return steps_from(marks, host_work, counts, host_range_windows(marks, kernels))


def step_marks(ops: pl.DataFrame) -> pl.DataFrame:
    """The ``ProfilerStep#N`` ranges (``step``, ``name``, ``step_op_id``, ``ts``,
    ``cpu_end``), the first of each step number, in time order."""
    return (
        ops.filter(pl.col("name").str.starts_with(STEP_PREFIX))
        .select(
            step=pl.col("name").str.slice(len(STEP_PREFIX)).cast(pl.Int64, strict=False),
            name="name",
            step_op_id="op_id",
            ts="ts",
            cpu_end="end",
        )
        .filter(pl.col("step").is_not_null())
        .sort("ts")
        .unique(subset=["step"], keep="first", maintain_order=True)
    )


def _no_steps(marks: pl.DataFrame) -> pl.DataFrame:
    return marks.with_columns(
        gpu_end=pl.lit(None, pl.Int64),
        start=pl.col("ts"),
        end=pl.col("cpu_end"),
        dur=pl.lit(0, pl.Int64),
        gpu_work=pl.lit(0, pl.UInt32),
        host_work=pl.lit(0, pl.UInt32),
        complete=pl.lit(True),
        cut_reason=pl.lit(None, pl.String),
    )


def host_work_of(ops: pl.DataFrame, marks: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per step, the host ops run in its range (``step, host_work``), and how
    often each op or annotation name ran there (``step, name, n``).  Both are
    sums over ops: a trace's parts can be counted apart and added."""
    # Columns picked before rows: filtering the whole op table copied every column.
    host = ops.select("ts", "name", "kind").filter(pl.col("kind").cast(pl.String).is_in(("op", "annotation")))
    host = _step_of(host, marks, "ts").filter(~pl.col("name").str.starts_with(STEP_PREFIX))
    host_work = host.filter(pl.col("kind").cast(pl.String) == "op").group_by("step").agg(host_work=pl.len())
    return host_work, host.group_by("step", "name").agg(n=pl.len())


def steps_from(marks: pl.DataFrame, host_work: pl.DataFrame, counts: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The steps table from its parts: ``marks`` (:func:`step_marks`), the host
    work and op counts (:func:`host_work_of`) and the windows over the GPU work
    (:func:`host_range_windows`)."""
    if marks.height == 0:
        return _no_steps(marks)
    steps = windows.join(host_work.cast({"host_work": pl.UInt32}), on="step", how="left", maintain_order="left")
    steps = steps.with_columns(pl.col("host_work").fill_null(0))
    flags, reasons = incomplete_last_step(steps, counts)
    return steps.with_columns(
        complete=~pl.Series(flags, dtype=pl.Boolean), cut_reason=pl.Series(reasons, dtype=pl.String)
    ).select(
        "step", "name", "step_op_id", "ts", "cpu_end", "gpu_end", "start", "end", "dur", "gpu_work", "host_work",
        "complete", "cut_reason",
    )


def host_range_windows(marks: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """``marks`` (``step``, ``ts``, ``cpu_end``: host ranges, one per distinct
    ``step``) as disjoint windows over their GPU work, sorted by ``ts``.

    Adds ``gpu_end``, ``gpu_work`` (GPU activities launched in the range),
    ``first_gpu`` (start of the first of them) and ``start``, ``end``,
    ``dur``: the window rules of the module docstring.  Profiler steps and
    the iterations of an inference engine
    (:mod:`kinetolens.analysis.inference.phases`) are both cut this way.
    """
    gpu = launched_activity(kernels)
    launched = _step_of(gpu.filter(pl.col("launch_ts").is_not_null()), marks, "launch_ts")
    per_step = gpu_work_of(launched)
    return windows_from(marks, per_step, _queued_before_first_step(_unlaunched_ends(gpu, launched), _first_gpu(marks, per_step)))


def launched_activity(kernels: pl.DataFrame) -> pl.DataFrame:
    """The GPU activities that can belong to a step: ``launch_ts``, ``ts``, ``kend``, a row number ``_k``."""
    return (
        kernels.select("kind", "launch_ts", "ts", "dur")
        .filter(pl.col("kind").cast(pl.String).is_in(GPU_ACTIVITY) & (pl.col("dur") >= 0))
        .select("launch_ts", "ts", kend=pl.col("ts") + pl.col("dur"))
        .with_row_index("_k")
    )


def gpu_work_of(launched: pl.DataFrame) -> pl.DataFrame:
    """Per step (``launched`` carries its ``step``): ``gpu_end``, ``gpu_work``, ``first_gpu``.
    A maximum, a count and a minimum: parts of a trace can be taken apart and combined."""
    return launched.group_by("step").agg(gpu_end=pl.col("kend").max(), gpu_work=pl.len(), first_gpu=pl.col("ts").min())


def _first_gpu(marks: pl.DataFrame, per_step: pl.DataFrame) -> int | None:
    """Start of the first step's first GPU activity, if it launched any."""
    if marks.height == 0:
        return None
    first = marks.sort("ts")["step"][0]
    row = per_step.filter(pl.col("step") == first)["first_gpu"]
    return int(row[0]) if row.len() and row[0] is not None else None


def windows_from(marks: pl.DataFrame, per_step: pl.DataFrame, queued_before: int) -> pl.DataFrame:
    """The windows of :func:`host_range_windows` from ``per_step`` (:func:`gpu_work_of`)
    and the end of GPU work queued before the first step (:func:`_queued_before_first_step`)."""
    steps = (
        marks.join(per_step.cast({"gpu_work": pl.UInt32}), on="step", how="left")
        .with_columns(pl.col("gpu_work").fill_null(0), own_end=pl.max_horizontal("cpu_end", "gpu_end"))
        .sort("ts")
    )
    if steps.height == 0:
        return steps.with_columns(start=pl.col("ts"), end=pl.col("cpu_end"), dur=pl.lit(0, pl.Int64)).drop("own_end")
    first_start = max(int(steps["ts"][0]), queued_before)
    # A step ends no earlier than it starts, and starts where the previous
    # one ended: both are a running maximum of the steps' own ends.
    ts = pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(first_start)).otherwise(pl.col("ts"))
    ends = pl.max_horizontal("own_end", ts).cum_max()
    steps = steps.with_columns(start=pl.max_horizontal(ts, ends.shift(1)).fill_null(ts), end=ends)
    return steps.with_columns(dur=pl.col("end") - pl.col("start")).drop("own_end")


def _unlaunched_ends(gpu: pl.DataFrame, launched: pl.DataFrame) -> pl.Series:
    """The ends of the GPU activities no step launched."""
    return gpu.filter(~pl.col("_k").is_in(launched["_k"].implode()))["kend"]


def _queued_before_first_step(unlaunched_ends: pl.Series, first_gpu: int | None) -> int:
    """End of GPU work not launched by any step that drains before the first
    step's own GPU work starts (the first step cannot have run then)."""
    if first_gpu is None:
        return _NEVER
    best = unlaunched_ends.filter(unlaunched_ends < first_gpu).max()
    return int(best) if best is not None else _NEVER  # type: ignore[arg-type]


def steps_in_parts(marks: pl.DataFrame, host_parts: Iterable[pl.DataFrame], kernel_parts: Iterable[pl.DataFrame]) -> pl.DataFrame:
    """:func:`build_steps` of a trace whose ops and GPU activities come a part
    at a time (a trace too large to hold: :mod:`kinetolens.windowed`).

    ``marks``: :func:`step_marks` of the whole trace; ``host_parts``: its ops
    (``ts``, ``name``, ``kind``); ``kernel_parts``: its device activities
    (``kind``, ``launch_ts``, ``ts``, ``dur``).  Each part is reduced to the
    sums, counts, minima and maxima the steps are made of, so memory holds
    one part and those, and the result is :func:`build_steps`' own.
    """
    if marks.height == 0:
        return _no_steps(marks)
    works, counts = [_EMPTY_WORK], [_EMPTY_COUNTS]
    for part in host_parts:
        work, count = host_work_of(part, marks)
        works.append(work.cast(_EMPTY_WORK.schema))
        counts.append(count.cast(_EMPTY_COUNTS.schema))
    host_work = pl.concat(works).group_by("step").agg(pl.col("host_work").sum())
    count = pl.concat(counts).group_by("step", "name").agg(pl.col("n").sum())
    per_step, unlaunched = [_EMPTY_GPU_WORK], [pl.Series("kend", [], pl.Int64)]
    for part in kernel_parts:
        gpu = launched_activity(part)
        launched = _step_of(gpu.filter(pl.col("launch_ts").is_not_null()), marks, "launch_ts")
        per_step.append(gpu_work_of(launched).cast(_EMPTY_GPU_WORK.schema))
        unlaunched.append(_unlaunched_ends(gpu, launched))
    gpu_work = pl.concat(per_step).group_by("step").agg(pl.col("gpu_end").max(), pl.col("gpu_work").sum(), pl.col("first_gpu").min())
    queued = _queued_before_first_step(pl.concat(unlaunched), _first_gpu(marks, gpu_work))
    return steps_from(marks, host_work, count, windows_from(marks, gpu_work, queued))


_EMPTY_WORK = pl.DataFrame(schema={"step": pl.Int64, "host_work": pl.UInt32})
_EMPTY_COUNTS = pl.DataFrame(schema={"step": pl.Int64, "name": pl.String, "n": pl.UInt32})
_EMPTY_GPU_WORK = pl.DataFrame(schema={"step": pl.Int64, "gpu_end": pl.Int64, "gpu_work": pl.UInt32, "first_gpu": pl.Int64})


def _short_names(counts: pl.DataFrame, steps: list[int]) -> pl.DataFrame:
    """Op names every earlier step ran equally often (two or more steps) that
    the last step ran fewer times: ``name, usual, last``, collectives first."""
    others, last = steps[:-1], steps[-1]
    per = counts.filter(pl.col("step").is_in(steps))
    usual = (
        per.filter(pl.col("step").is_in(others))
        .group_by("name")
        .agg(usual=pl.col("n").min(), high=pl.col("n").max(), seen=pl.len())
        .filter((pl.col("seen") == len(others)) & (pl.col("usual") == pl.col("high")))
    )
    ran = per.filter(pl.col("step") == last).select("name", last="n")
    short = usual.join(ran, on="name", how="left").with_columns(pl.col("last").fill_null(0))
    # The backend's own collective ranges first, then c10d's, then any op.
    name = pl.col("name")
    rank = (
        pl.when(pl.any_horizontal(*(name.str.starts_with(p) for p in COMM_LIBRARY_PREFIXES)))
        .then(0)
        .when(is_comm_op(name))
        .then(1)
        .otherwise(2)
    )
    return (
        short.filter(pl.col("last") < pl.col("usual"))
        .sort(rank, pl.col("usual") - pl.col("last"), "name", descending=[False, True, False])
        .select("name", "usual", "last")
    )


def incomplete_last_step(steps: pl.DataFrame, counts: pl.DataFrame) -> tuple[list[bool], list[str | None]]:
    """For each step (rows in time order), whether it is a last step cut
    short, and the evidence.

    Only the last of two or more steps can be: the profiler (or the process)
    stopped inside it.  It is cut short when an op that every earlier step
    ran the same number of times (three or more steps) ran fewer times in it,
    e.g. 8 ``gloo:all_reduce`` where every other step ran 10, or when its
    work is below :data:`COMPLETE_WORK_SHARE` of the median of the other
    steps' work (GPU activities it launched when any step launched some,
    else host ops).  ``counts`` holds ``step, name, n``: ops per step.
    """
    n = steps.height
    flags: list[bool] = [False] * n
    reasons: list[str | None] = [None] * n
    if n < 2:
        return flags, reasons
    ids = [int(x) for x in steps["step"].to_list()]
    if n >= 3:
        short = _short_names(counts, ids)
        if short.height:
            name, usual, last = short.row(0)
            flags[-1] = True
            reasons[-1] = f"it ran {last} {name} where every other step ran {usual}"
            return flags, reasons
    column, what = ("gpu_work", "GPU activities") if int(steps["gpu_work"].sum()) > 0 else ("host_work", "host ops")
    others = steps[column].head(n - 1).cast(pl.Float64).median()
    last_work = int(steps[column][n - 1])
    if others is not None and last_work < COMPLETE_WORK_SHARE * float(others):  # type: ignore[arg-type]
        flags[-1] = True
        reasons[-1] = f"it ran {last_work:,} {what} against a median of {others:,.0f} in the other steps"
    return flags, reasons


def complete_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """The steps that ran whole: what means and per-rank comparisons average over."""
    return steps.filter(pl.col("complete"))


def incomplete_steps(steps: pl.DataFrame) -> list[int]:
    """Step numbers cut short by the end of profiling (at most the last one)."""
    return [int(s) for s in steps.filter(~pl.col("complete"))["step"].to_list()]


def assign_steps(
    steps: pl.DataFrame, ops: pl.DataFrame, runtime: pl.DataFrame, kernels: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Give every op, launch and kernel the step it belongs to (or null).

    Host events belong to the step whose host range holds them, GPU work to
    the step that launched it.  GPU work whose launch the trace lacks
    (launched before the profiler started) belongs to the step whose window
    it starts in: the queued work a first step waits for has none.
    """
    if steps.height == 0:
        null = pl.lit(None, pl.Int64).alias("step")
        return ops.with_columns(null), runtime.with_columns(null), kernels.with_columns(null)
    ranges = steps.select(
        "step", step_ts="ts", step_cpu_end="cpu_end", step_start="start", step_end="end"
    ).sort("step_ts")
    windows = steps.select("step", step_start="start", step_end="end").filter(
        pl.col("step_end") > pl.col("step_start")
    ).sort("step_start")

    # Only the time columns are sorted and joined; the step column is then
    # attached to the wide tables in their own order.  Sorting and joining
    # the wide tables themselves would copy every column of them twice.
    def step_of(times: pl.DataFrame, keep: pl.Expr, by: pl.DataFrame, on: str) -> pl.Series:
        keyed = (
            times.with_row_index("_row")
            .sort("_t")
            .join_asof(by, left_on="_t", right_on=on, strategy="backward")
            .sort("_row")
        )
        return keyed.select(step=pl.when(keep).then(pl.col("step")))["step"]

    host_end = pl.col("_t") < pl.col("step_cpu_end")
    ops = ops.with_columns(step_of(ops.select(_t="ts"), host_end, ranges, "step_ts"))
    runtime = runtime.with_columns(step_of(runtime.select(_t="ts"), host_end, ranges, "step_ts"))
    launched = kernels["launch_ts"].is_not_null()
    by_launch = step_of(kernels.select(_t=pl.col("launch_ts").fill_null(pl.col("ts"))), host_end, ranges, "step_ts")
    by_time = step_of(kernels.select(_t="ts"), pl.col("_t") < pl.col("step_end"), windows, "step_start")
    return ops, runtime, kernels.with_columns(by_launch.zip_with(launched, by_time).alias("step"))


def without_incomplete_steps(trace: Trace) -> Trace:
    """``trace`` without a last step the profiler cut short: its row in
    ``steps`` and the ops, launches and GPU work of that step are dropped.
    A trace whose steps all ran whole is returned as it is."""
    cut = incomplete_steps(trace.steps)
    if not cut:
        return trace
    keep = ~pl.col("step").is_in(cut).fill_null(False)
    return dataclasses.replace(
        trace,
        ops=trace.ops.filter(keep),
        runtime=trace.runtime.filter(keep),
        kernels=trace.kernels.filter(keep),
        steps=trace.steps.filter(keep),
    )
