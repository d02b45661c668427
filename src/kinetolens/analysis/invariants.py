"""What must hold of every result, checked on the results themselves.

Each invariant is a small function over the frames and dataclasses the
analyses return (never over CLI text), registered by name with the one
line that says why it must hold.  :func:`check_trace` computes each
analysis once per trace (:class:`Results`) and applies every invariant,
returning the :class:`Violation` s: which invariant, which result, and the
values that broke it.

Tolerance: times are integer nanoseconds turned into microseconds, so sums
of floats carry rounding noise; a figure may exceed its bound by
:data:`EPS_US` (1 ns) plus :data:`REL` (one part in a million) of the
bound, and a percentage by :data:`EPS_PCT` (0.01 percentage points, the
two decimals some tables round to, three times over for a sum of three).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kinetolens.errors import TraceError
from kinetolens.model.trace import Trace

#: Absolute slack on microsecond figures (1 ns).
EPS_US = 0.001
#: Relative slack on any figure compared with a bound.
REL = 1e-6
#: Slack on percentages (rounded to two decimals by some tables).
EPS_PCT = 0.03

#: What an invariant yields for each thing it finds wrong: the result and the values.
Bad = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its name, the result it was found in, the values that break it."""

    invariant: str
    result: str
    values: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        shown = ", ".join(f"{k}={_shown(v)}" for k, v in self.values.items())
        return f"{self.invariant}: {self.result}: {shown}"


def _shown(value: Any) -> str:
    return f"{value:,.3f}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Invariant:
    name: str
    why: str
    check: Callable[..., Iterable[Bad]]
    #: The :class:`Results` it reads, by the names of its parameters.
    reads: tuple[str, ...]


#: Every invariant by name, in registration order.
INVARIANTS: dict[str, Invariant] = {}


def invariant(name: str) -> Callable[[Callable[..., Iterable[Bad]]], Callable[..., Iterable[Bad]]]:
    """Register ``fn`` as the invariant ``name`` (its docstring's first line is the reason)."""

    def register(fn: Callable[..., Iterable[Bad]]) -> Callable[..., Iterable[Bad]]:
        if name in INVARIANTS:
            raise ValueError(f"invariant {name!r} is registered twice")
        why = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        if not why:
            raise ValueError(f"invariant {name!r} has no reason (a docstring)")
        INVARIANTS[name] = Invariant(name, why, fn, tuple(inspect.signature(fn).parameters))
        return fn

    return register


def over(value: float | None, bound: float | None, eps: float = EPS_US) -> bool:
    """Whether ``value`` exceeds ``bound`` by more than float noise."""
    if value is None or bound is None:
        return False
    return value > bound + eps + REL * abs(bound)


def _negative(frame: pl.DataFrame | None, columns: Iterable[str], result: str, key: str | None = None) -> Iterator[Bad]:
    if frame is None or frame.height == 0:
        return
    for c in columns:
        if c not in frame.columns:
            continue
        low = frame.filter(pl.col(c) < -EPS_US)
        if low.height:
            row = low.sort(c).row(0, named=True)
            where = {key: row[key]} if key and key in row else {}
            yield result, {**where, c: row[c], "rows": low.height}


# --------------------------------------------------------------------------- durations, gaps, idle


@invariant("durations_nonnegative")
def durations_nonnegative(breakdown: pl.DataFrame, ops: pl.DataFrame, op_tree: pl.DataFrame, modules: pl.DataFrame | None, temporal: pl.DataFrame) -> Iterator[Bad]:
    """A duration is a length of time: no step part, op, module or busy figure is below zero."""
    from kinetolens.analysis.gputime.overview import COLUMNS

    yield from _negative(breakdown, COLUMNS, "step breakdown", "step")
    yield from _negative(ops, ("device_self_us", "device_total_us", "host_self_us", "host_total_us"), "ops", "name")
    yield from _negative(op_tree, ("device_self_us", "device_total_us", "host_total_us"), "op tree", "path")
    yield from _negative(modules, ("fwd_self_us", "fwd_total_us", "bwd_self_us", "bwd_total_us", "self_us", "total_us"), "modules", "path")
    yield from _negative(temporal, ("idle_us", "compute_us", "non_compute_us", "kernel_span_us"), "gpu time", "rank")


@invariant("idle_nonnegative")
def idle_nonnegative(idle_gaps: pl.DataFrame, idle_stats: pl.DataFrame, idle_breakdown: pl.DataFrame) -> Iterator[Bad]:
    """A gap is time a stream had nothing to run: overlapping work is overlap, never negative idle."""
    gaps = idle_gaps.with_columns(gap_us=pl.col("gap_ns") / 1000.0) if "gap_ns" in idle_gaps.columns else idle_gaps
    yield from _negative(gaps, ("gap_us",), "idle gaps", "stream")
    yield from _negative(idle_stats, ("min", "mean", "25%", "50%", "75%", "max"), "idle gap stats", "idle_category")
    yield from _negative(idle_breakdown, ("idle_us", "idle_ratio"), "idle breakdown", "idle_category")


# --------------------------------------------------------------------------- shares of a whole


@invariant("step_parts_add_up")
def step_parts_add_up(breakdown: pl.DataFrame) -> Iterator[Bad]:
    """Each instant of a step is given to one category, so the categories sum to the step's wall time."""
    from kinetolens.analysis.gputime.overview import CATEGORIES, OTHER

    if breakdown.height == 0:
        return
    parts = breakdown.with_columns(_parts=pl.sum_horizontal(*CATEGORIES, OTHER))
    for row in parts.filter(pl.col("_parts") != pl.col("total")).iter_rows(named=True):
        yield "step breakdown", {"step": row["step"], "parts_us": row["_parts"] / 1000, "total_us": row["total"] / 1000}


def _shares(frame: pl.DataFrame | None, column: str, result: str, rows: pl.Expr | None = None) -> Iterator[Bad]:
    if frame is None or frame.height == 0 or column not in frame.columns:
        return
    picked = frame.filter(rows) if rows is not None else frame
    total = float(picked[column].fill_null(0).sum())
    if over(total, 100.0, EPS_PCT):
        yield result, {f"sum of {column}": total, "rows": picked.height}


@invariant("shares_at_most_whole")
def shares_at_most_whole(ops: pl.DataFrame, op_tree: pl.DataFrame, modules: pl.DataFrame | None, kernel_types: pl.DataFrame) -> Iterator[Bad]:
    """Shares of one whole (op self times, op-tree and module roots, kernel types) sum to at most 100%."""
    yield from _shares(ops, "step_share_pct", "ops (self time, % of step)")
    yield from _shares(op_tree, "step_share_pct", "op tree roots (% of step)", pl.col("depth") == 0)
    yield from _shares(modules, "step_share_pct", "module roots (% of step)", pl.col("depth") == 0)
    yield from _shares(kernel_types, "pct", "kernel types (% of GPU time)")


@invariant("device_fractions_at_most_one")
def device_fractions_at_most_one(gpu_metrics: pl.DataFrame, temporal: pl.DataFrame) -> Iterator[Bad]:
    """Per-device utilization, SM efficiency and the idle/compute/other split are parts of the device's time."""
    for c in ("utilization", "sm_efficiency", "tensor_core_share"):
        if c in gpu_metrics.columns:
            for row in gpu_metrics.filter(pl.col(c) > 1.0 + REL).iter_rows(named=True):
                yield "gpu metrics", {"device": row.get("device"), c: row[c]}
    for row in temporal.iter_rows(named=True):
        parts = sum(float(row[c] or 0) for c in ("idle_us", "compute_us", "non_compute_us"))
        if abs(parts - float(row["kernel_span_us"])) > EPS_US + REL * float(row["kernel_span_us"]):
            yield "gpu time", {"rank": row["rank"], "idle+compute+other_us": parts, "span_us": row["kernel_span_us"]}


@invariant("module_roots_within_gpu_time")
def module_roots_within_gpu_time(modules: pl.DataFrame | None, gpu_time_us: float) -> Iterator[Bad]:
    """Root modules partition the work: their totals cannot exceed all the GPU time there is."""
    if modules is None or modules.height == 0 or gpu_time_us <= 0:
        return
    roots = modules.filter(pl.col("depth") == 0)
    total = float(roots["total_us"].fill_null(0).sum())
    if over(total, gpu_time_us):
        yield "module roots", {"roots_total_us": total, "gpu_time_us": gpu_time_us, "roots": roots.height}


@invariant("self_within_total")
def self_within_total(ops: pl.DataFrame, op_tree: pl.DataFrame, modules: pl.DataFrame | None) -> Iterator[Bad]:
    """Self time is the part of a total its children do not cover, so it is never larger."""
    pairs = [
        (ops, "ops", "name", ("device_self_us", "device_total_us"), ("host_self_us", "host_total_us")),
        (op_tree, "op tree", "path", ("device_self_us", "device_total_us")),
        (modules, "modules", "path", ("self_us", "total_us"), ("fwd_self_us", "fwd_total_us"), ("bwd_self_us", "bwd_total_us")),
    ]
    for frame, result, key, *cols in pairs:
        if frame is None or frame.height == 0:
            continue
        for s, t in cols:
            bad = frame.filter(pl.col(s) > pl.col(t) + EPS_US + REL * pl.col(t).abs())
            if bad.height:
                row = bad.row(0, named=True)
                yield result, {key: row[key], s: row[s], t: row[t], "rows": bad.height}


# --------------------------------------------------------------------------- steps


@invariant("step_windows_disjoint_in_trace")
def step_windows_disjoint_in_trace(steps: pl.DataFrame, trace_span: tuple[int, int] | None) -> Iterator[Bad]:
    """A step is a stretch of the trace's own time, and no instant belongs to two steps."""
    if steps.height == 0 or trace_span is None:
        return
    lo, hi = trace_span
    s = steps.sort("start")
    for row in s.filter((pl.col("start") < lo) | (pl.col("end") > hi) | (pl.col("end") < pl.col("start"))).iter_rows(named=True):
        yield "steps", {"step": row["step"], "start": row["start"], "end": row["end"], "trace_start": lo, "trace_end": hi}
    prev_end = s["end"].shift(1)
    lap = s.with_columns(_prev=prev_end).filter(pl.col("start") < pl.col("_prev"))
    for row in lap.iter_rows(named=True):
        yield "steps", {"step": row["step"], "start": row["start"], "previous_end": row["_prev"], "overlap_us": (row["_prev"] - row["start"]) / 1000}


@invariant("summary_agrees_with_analyses")
def summary_agrees_with_analyses(summary: dict[str, Any], unit_breakdown: pl.DataFrame, gpu_metrics: pl.DataFrame) -> Iterator[Bad]:
    """A figure is defined once: the summary's step time and GPU utilization are those the analyses compute."""
    from kinetolens.analysis.gputime.overview import average_breakdown

    breakdown = unit_breakdown  # per step, or per engine iteration of an inference trace
    steps = summary.get("steps") or {}
    if breakdown.height and steps.get("average_us"):
        mean = average_breakdown(breakdown)["total"] / 1000.0
        got = float(steps["average_us"]["total"])
        if abs(got - mean) > EPS_US + REL * mean:
            yield "summary steps", {"summary_total_us": got, "breakdown_total_us": mean}
        if steps.get("mean_us") is not None and abs(float(steps["mean_us"]) - mean) > EPS_US + REL * mean:
            yield "summary steps", {"summary_mean_us": steps["mean_us"], "breakdown_total_us": mean}
    mine = {row.get("device"): row.get("utilization") for row in summary.get("gpu") or []}
    for row in gpu_metrics.iter_rows(named=True):
        a, b = mine.get(row["device"]), row.get("utilization")
        if (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > REL):
            yield "summary gpu", {"device": row["device"], "summary_utilization": a, "gpu_metrics_utilization": b}


# --------------------------------------------------------------------------- critical path


@invariant("critical_path_within_span")
def critical_path_within_span(paths: list[Any]) -> Iterator[Bad]:
    """A path's stretches follow one another in time, so its length is at most the time it spans."""
    for p in paths:
        if over(p.length_us, p.span_us):
            yield f"critical path {p.window.label}", {"length_us": p.length_us, "span_us": p.span_us}
        yield from _negative(p.path, ("us",), f"critical path {p.window.label}", "name")


#: Slack on a path's parts adding up to its window: each part is a difference of two
#: nanosecond times turned into microseconds (absolute times near 1.7e15 ns lose no
#: precision as integers, but the window's extent and the parts are separate floats).
PATH_COVER_EPS_US = 0.01


@invariant("critical_path_covers_window")
def critical_path_covers_window(paths: list[Any]) -> Iterator[Bad]:
    """A path says where all of its window went: its bounds, the untraced time between its ops, and the named time before its start and after its end add up to the window (the model's step window where the path is cut to it, else its host range, or to its last activity's end where the GPU ran past it)."""
    for p in paths:
        clip = getattr(p.window, "clip", None)
        lo, hi = clip if clip is not None else (p.window.start, p.window.end)
        host_us = (hi - lo) / 1000
        parts = {"length_us": p.length_us, "untraced_us": p.span_us - p.length_us, "before_us": p.before_us, "after_us": p.after_us}
        where = f"critical path {p.window.label}"
        bounds = float(p.summary["us"].sum()) if p.summary.height and "us" in p.summary.columns else p.length_us
        missing = p.window_us - sum(parts.values())
        if abs(missing) > PATH_COVER_EPS_US + REL * abs(p.window_us) or over(host_us, p.window_us) or over(bounds, p.length_us) or over(p.length_us, bounds):
            yield where, {**parts, "bounds_us": bounds, "window_us": p.window_us, "host_window_us": host_us, "missing_us": missing}
        elif any(v < -EPS_US for v in parts.values()):
            yield where, {**parts, "window_us": p.window_us}


#: The critical path's GPU bounds and the kind of stream work each is.
PATH_GPU_BOUNDS = {"gpu_compute": "COMPUTATION", "gpu_memory": "MEMORY", "communication": "COMMUNICATION"}


@invariant("critical_path_bound_within_work")
def critical_path_bound_within_work(paths: list[Any], stream_work: pl.DataFrame) -> Iterator[Bad]:
    """The path cannot be bound by GPU work longer than that work ran: each GPU bound is at most the union of its kind in the path's span."""
    from kinetolens.analysis.gputime.gpu_streams import covered_ns, union_intervals

    for p in paths:
        rows = p.path.filter(pl.col("us") > 0)
        if rows.height == 0:
            continue
        # The path's times are absolute microseconds in floats: near 1.7e15 us
        # they step by 0.25 us, so the span is widened by that rounding.
        first = float(rows["start_us"].min())  # type: ignore[arg-type]
        slack = math.ulp(abs(first)) * 1000
        lo = first * 1000 - slack
        hi = float((rows["start_us"] + rows["us"]).max()) * 1000 + slack  # type: ignore[arg-type]
        for bound, kind in PATH_GPU_BOUNDS.items():
            bound_rows = rows.filter(pl.col("bound_by") == bound)
            on_path = float(bound_rows["us"].sum())
            if on_path <= 0:
                continue
            work = stream_work.filter(pl.col("kernel_type") == kind).select(
                ts=pl.col("ts").clip(int(lo), int(hi)), end=pl.col("end").clip(int(lo), int(hi))
            ).filter(pl.col("end") > pl.col("ts"))
            union = covered_ns(union_intervals(work)) / 1000.0
            if over(on_path, union):
                yield f"critical path {p.window.label}", {"bound": bound, "on_path_us": on_path, "union_us": union}


# --------------------------------------------------------------------------- recommendations and roofline


@invariant("recommendation_saves_and_shortens")
def recommendation_saves_and_shortens(summary: dict[str, Any]) -> Iterator[Bad]:
    """Advice saves time or says nothing: a saving is >= 0 and the step it predicts is no longer than today's."""
    steps = summary.get("steps") or {}
    step_us = steps.get("mean_us") or (steps.get("average_us") or {}).get("total") or 0.0
    step_ms = step_us / 1000.0
    for f in summary.get("recommendations") or []:
        saving, predicted = f.get("saving_ms"), f.get("predicted_step_ms")
        if saving is not None and saving < -EPS_US / 1000:
            yield f"recommendation {f['rule']}", {"saving_ms": saving}
        if predicted is not None and f.get("per", "step") == "step" and step_ms and over(predicted, step_ms, EPS_US / 1000):
            yield f"recommendation {f['rule']}", {"predicted_step_ms": predicted, "step_ms": step_ms, "saving_ms": saving}


@invariant("roof_at_most_100")
def roof_at_most_100(roofline: pl.DataFrame | None, modules: pl.DataFrame | None) -> Iterator[Bad]:
    """The roof is the fastest the hardware can run the work: % of roof passes 100 only where flagged as beating the model."""
    for frame, result, key in ((roofline, "roofline", "op"), (modules, "modules", "path")):
        if frame is None or frame.height == 0 or "pct_of_roof" not in frame.columns:
            continue
        bad = frame.filter(pl.col("pct_of_roof") > 100.0 + EPS_PCT)
        from kinetolens.analysis.hardware.roofline import BEATS_MODEL

        if BEATS_MODEL in frame.columns:
            bad = bad.filter(~pl.col(BEATS_MODEL).fill_null(False))
        for row in bad.iter_rows(named=True):
            yield result, {key: row.get(key), "pct_of_roof": row["pct_of_roof"]}


@invariant("counters_are_counts")
def counters_are_counts(counters: pl.DataFrame | None) -> Iterator[Bad]:
    """Hardware counters count work done: never negative, and each kernel launch carries one kernel's counters at most."""
    if counters is None or counters.height == 0:
        return
    measured = [c for c in ("flops", "tensor_flops", "dram_bytes") if c in counters.columns]
    yield from _negative(counters, measured, "counters", "kernel")
    paired = counters.filter(pl.col("launch_id").is_not_null())
    twice = paired.group_by("launch_id").agg(pl.len().alias("ranges")).filter(pl.col("ranges") > 1)
    for row in twice.iter_rows(named=True):
        yield "counters", {"launch_id": row["launch_id"], "ranges": row["ranges"]}


#: Intensities this close to the ridge point (relative) may round either way.
RIDGE_SLACK = 0.01


@invariant("bound_matches_intensity")
def bound_matches_intensity(roofline: pl.DataFrame | None, spec: Any) -> Iterator[Bad]:
    """Below the ridge point (peak FLOP/s over bandwidth) work is memory-bound, above it compute-bound."""
    from kinetolens.analysis.hardware.roofline import peak_tflops

    if roofline is None or spec is None or roofline.height == 0 or not getattr(spec, "dram_gbps", None):
        return
    for row in roofline.filter(pl.col("bound").is_in(["memory", "compute"]) & pl.col("intensity").is_not_null()).iter_rows(named=True):
        peak = peak_tflops(spec, row.get("ceiling"))
        if not peak:
            continue
        ridge = peak * 1e12 / (spec.dram_gbps * 1e9)
        if abs(row["intensity"] - ridge) <= RIDGE_SLACK * ridge:
            continue
        want = "memory" if row["intensity"] < ridge else "compute"
        if row["bound"] != want:
            yield "roofline", {"op": row.get("op"), "bound": row["bound"], "intensity": row["intensity"], "ridge": ridge}


# --------------------------------------------------------------------------- the runner


class Results:
    """Each analysis of one trace, computed on first use and kept.

    ``given`` supplies results directly (tests build a wrong one to prove an
    invariant fails); an analysis that cannot run on the trace (no roofs for
    its GPU, no host events for a path) is None or empty, and its invariants
    have nothing to check.
    """

    def __init__(self, trace: Trace | None, given: dict[str, Any] | None = None) -> None:
        self.trace = trace
        self._values: dict[str, Any] = dict(given or {})

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            if self.trace is None:
                raise KeyError(f"no result {name!r} given and no trace to compute it from")
            self._values[name] = PRODUCERS[name](self)
        return self._values[name]


def _counters(r: Results) -> pl.DataFrame | None:
    from kinetolens.analysis.hardware.counters import NoCounters, counter_table

    assert r.trace is not None
    try:
        return counter_table(r.trace)
    except NoCounters:
        return None


def _spec(r: Results) -> Any:
    from kinetolens.analysis.hardware.gpu_spec import gpu_spec

    return gpu_spec(r.trace) if r.trace is not None and r.trace.kernels.height else None


def _roofline(r: Results) -> pl.DataFrame | None:
    from kinetolens.analysis.hardware.roofline import roofline_by

    if r["spec"] is None:
        return None
    try:
        return roofline_by(r.trace, r["spec"])  # type: ignore[arg-type]
    except TraceError:  # no roofs for this GPU
        return None


def _modules(r: Results) -> pl.DataFrame | None:
    from kinetolens.analysis.hardware.module_tree import module_tree

    return module_tree(r.trace, r["spec"])  # type: ignore[arg-type]


def _paths(r: Results) -> list[Any]:
    from kinetolens.analysis.paths.critical_path import critical_paths, step_windows

    trace = r.trace
    assert trace is not None
    try:
        return critical_paths(trace, step_windows(trace))
    except TraceError:  # no host events to take a path through
        return []


def _trace_span(r: Results) -> tuple[int, int] | None:
    trace = r.trace
    assert trace is not None
    parts = [t for t in (trace.ops, trace.kernels, trace.runtime) if t.height]
    if not parts:
        return None
    return min(int(t["ts"].min()) for t in parts), max(int((t["ts"] + t["dur"]).max()) for t in parts)  # type: ignore[arg-type]


def _gpu_time_us(r: Results) -> float:
    trace = r.trace
    assert trace is not None
    k = trace.kernels
    return float(k.filter(pl.col("dur") > 0)["dur"].sum()) / 1000.0 if k.height else 0.0


def _unit_breakdown(r: Results) -> pl.DataFrame:
    """The breakdown the advice and the summary are per: steps, or an inference trace's iterations."""
    from kinetolens.analysis.advice.recommendations import RuleContext

    return RuleContext(r.trace).breakdown  # type: ignore[arg-type]


def _producers() -> dict[str, Callable[[Results], Any]]:
    from kinetolens.analysis.gputime import idle
    from kinetolens.analysis.gputime.gpu_streams import stream_work
    from kinetolens.analysis.gputime.overview import step_breakdown
    from kinetolens.analysis.hardware.gpu_metrics import gpu_metrics
    from kinetolens import json_codec
    from kinetolens.analysis.summary import summarize
    from kinetolens.analysis.workload.op_tree import op_tree
    from kinetolens.analysis.workload.ops import op_stats

    return {
        "steps": lambda r: r.trace.steps,
        "trace_span": _trace_span,
        "breakdown": lambda r: step_breakdown(r.trace),
        "unit_breakdown": _unit_breakdown,
        "idle_gaps": lambda r: idle.idle_gaps(r.trace),
        "idle_stats": lambda r: idle.idle_gap_stats(r.trace),
        "idle_breakdown": lambda r: idle.idle_breakdown(r.trace),
        "temporal": lambda r: idle.temporal_breakdown(r.trace),
        "kernel_types": lambda r: idle.kernel_type_breakdown(r.trace),
        "stream_work": lambda r: stream_work(r.trace),
        "gpu_metrics": lambda r: gpu_metrics(r.trace),
        "gpu_time_us": _gpu_time_us,
        "ops": lambda r: op_stats(r.trace),
        "op_tree": lambda r: op_tree(r.trace),
        "spec": _spec,
        "modules": _modules,
        "roofline": _roofline,
        "counters": _counters,
        "paths": _paths,
        # as `summary --json` writes it: the checks read the document users get
        "summary": lambda r: json_codec.to_builtins(summarize(r.trace)),
    }


class _Lazy(dict):  # type: ignore[type-arg]
    """The producers, imported on first use (importing kinetolens stays light)."""

    def __missing__(self, name: str) -> Callable[[Results], Any]:
        if not self:
            self.update(_producers())
            if name in self:
                return self[name]  # type: ignore[no-any-return]
        raise KeyError(name)


PRODUCERS: dict[str, Callable[[Results], Any]] = _Lazy()


def run(results: Results, names: Iterable[str] | None = None) -> list[Violation]:
    """Apply the invariants ``names`` (all by default) to ``results``."""
    out: list[Violation] = []
    for name in names or INVARIANTS:
        inv = INVARIANTS[name]
        args = [results[p] for p in inv.reads]
        out.extend(Violation(name, result, values) for result, values in inv.check(*args))
    return out


def check_trace(trace: Trace) -> list[Violation]:
    """Every invariant on every analysis of ``trace``, each analysis computed once."""
    return run(Results(trace))
