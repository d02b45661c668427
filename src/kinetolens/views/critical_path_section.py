"""The critical path as the report and the dashboard show it: per step, the split, the top items, a verdict.

Every number comes from :mod:`kinetolens.analysis.paths.critical_path`; this
module picks the windows (each complete step, one chosen step, or the whole
trace when it has no steps), names the columns so that
:func:`kinetolens.views.units.display` formats them (``time_us`` in one
unit per column, ``share_pct`` as a percentage), and words the one-line
verdict and notes. The report (:mod:`.critical_path_report`) and the
dashboard page (:mod:`.dashboard.critical_path_page`) render the same
:class:`CriticalPathSection`, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kinetolens.analysis.paths.critical_path import (
    ACTIVITY_BOUNDS,
    BOUND_BY,
    CriticalPath,
    Window,
    combined,
    critical_paths,
    per_window,
    step_window,
    step_windows,
    summarize,
    top_items,
    window_bounds,
)
from kinetolens.analysis.paths.sampling import SAMPLE_STEPS, sample
from kinetolens.errors import TraceError
from kinetolens.analysis.session import whole_steps
from kinetolens.model.trace import Trace
from kinetolens.model.vocabulary import BOUND_WORDS
from kinetolens.registry.kernel_names import short_names
from kinetolens.views import units
from kinetolens.views.plot_spec import Figure, figure
from kinetolens.views.plot_spec import title as title_of

#: One colour per bound, the same in every chart.
BOUND_COLORS = {
    "cpu": "#b279a2",
    "data_loading": "#eeca3b",
    "launch_overhead": "#54a24b",
    "kernel_gap": "#bab0ac",
    "gpu_compute": "#4c78a8",
    "gpu_memory": "#f58518",
    "communication": "#72b7b2",
    "sync_wait": "#e45756",
}
#: Rows of each top table.
TOP_ROWS = 10
#: The top tables: key -> (title, the path column grouped by, bounds kept).
TOPS: dict[str, tuple[str, str, tuple[str, ...] | None]] = {
    "ops": ("Ops on the path (an op's own CPU time and the GPU work it launched)", "op", None),
    "kernels": ("Kernels on the path (their run time)", "name", ACTIVITY_BOUNDS),
    "modules": ("Modules on the path", "module", None),
    "sources": ("Source lines on the path", "source", None),
}
#: What a top table says instead of an empty table.
TOP_EMPTY = {
    "ops": "No op on the path carries time.",
    "kernels": "No GPU kernel on the path",
    "modules": "No module on the path: the ops carry no nn.Module paths (profile with with_modules=True or with_stack=True).",
    "sources": "No source line on the path: the ops carry no call sites (profile with with_stack=True).",
}


@dataclass
class CriticalPathSection:
    """The critical path of the windows shown, as tables ready to display."""

    paths: list[CriticalPath]
    #: ``step``, ``length_us``, ``span_us``, ``before_path_us``, ``after_path_us``, ``window_us``
    #: (the window's time the path does not reach, named), ``mostly``, ``share_pct``: one row per window.
    steps: pl.DataFrame
    #: ``window``, ``bound``, ``time_us``, ``share_pct``: each window's split (the chart).
    split: pl.DataFrame
    #: ``bound``, ``time_us``, ``share_pct``, ``edges``: all windows together.
    summary: pl.DataFrame
    #: :data:`TOPS` key -> ``<by>``, ``bound``, ``time_us``, ``share_pct``.
    tops: dict[str, pl.DataFrame]
    length_us: float
    span_us: float
    verdict: str
    #: One line each: the window rule (no steps), a CPU-only trace, a clock offset.
    notes: list[str] = field(default_factory=list)
    #: Whether the trace recorded GPU work at all.
    gpu: bool = True
    #: How many windows the traced ones were taken from (more than ``len(paths)``
    #: when a long trace's steps were sampled).
    of: int = 0

    @property
    def mean_length_us(self) -> float:
        return self.length_us / len(self.paths)

    @property
    def summary_title(self) -> str:
        return "What bounds the path" + (f", {len(self.paths)} steps together" if len(self.paths) > 1 else "")

    def empty_line(self, key: str) -> str:
        """The line shown instead of the ``key`` top table when it has no rows."""
        if key != "kernels":
            return TOP_EMPTY[key]
        return TOP_EMPTY[key] + (": the path runs through CPU work only." if self.gpu else ": a CPU-only trace.")


def _windows(trace: Trace, step: int | None) -> tuple[Trace, list[Window], int, list[str]]:
    """The windows analysed, how many they were taken from, and the line that
    says which when it is not every step: a long trace's paths are traced on
    :data:`SAMPLE_STEPS` steps spread over it."""
    if step is not None:
        return trace, [step_window(trace, step)], 1, []
    whole = whole_steps(trace)  # as `kinetolens critical-path`
    windows = step_windows(whole)
    if whole.steps.height == 0:
        why = "no complete profiler step" if trace.steps.height else "no profiler steps"
        return whole, windows, len(windows), [f"The trace has {why}: the path covers the whole trace."]
    taken = [windows[i] for i in sample(len(windows), SAMPLE_STEPS)]
    if len(taken) == len(windows):
        return whole, windows, len(windows), []
    steps = ", ".join(str(w.step) for w in taken)
    note = (
        f"Traced on {len(taken)} of the {len(windows)} complete steps, spread over the trace (steps {steps}); "
        "kinetolens critical-path traces every step, --step N one."
    )
    return whole, taken, len(windows), [note]


def _labelled() -> pl.Expr:
    return pl.col("bound_by").replace_strict(BOUND_WORDS, default=pl.col("bound_by"), return_dtype=pl.String).alias("bound")


def _top(path: pl.DataFrame, length: float, key: str) -> pl.DataFrame:
    _, by, bounds = TOPS[key]
    frame = top_items(path, by, length, TOP_ROWS, bounds)
    if key == "kernels" and frame.height:
        frame = frame.with_columns(short_names(frame["name"]).alias("name"))
    name = "kernel" if key == "kernels" else by
    return frame.select(pl.col(by).alias(name), _labelled(), time_us="us", share_pct="pct")


def verdict(summary: pl.DataFrame, tops: dict[str, pl.DataFrame], mean_us: float, windows: int) -> str:
    """One line: what bounds the step, by how much, and the largest item on the path."""
    ranked = summary.filter(pl.col("time_us") > 0).sort("time_us", descending=True)
    if ranked.height == 0:
        return "The critical path carries no time."
    first = ranked.row(0, named=True)
    per = "per step (mean of %d steps)" % windows if windows > 1 else ""
    line = f"Bound by {first['bound']}: {units.percent(first['share_pct'] / 100)} of a {units.duration(mean_us)} critical path{' ' + per if per else ''}"
    if ranked.height > 1:
        second = ranked.row(1, named=True)
        line += f", then {second['bound']} ({units.percent(second['share_pct'] / 100)})"
    items = [t for t in (tops["ops"], tops["kernels"]) if t.height]
    if items:
        best = max(items, key=lambda t: float(t["time_us"][0]))
        name = units.middle(str(best[best.columns[0]][0]), 60)
        line += f". Largest item on it: {name} ({units.percent(float(best['share_pct'][0]) / 100)})"
    return line + "."


def critical_path_section(trace: Trace, step: int | None = None) -> CriticalPathSection | str:
    """The section for ``step`` (default: every complete step, at most
    :data:`SAMPLE_STEPS` of them spread over a longer trace), or the one line
    saying why there is none (no CPU ops or runtime calls to build a path from)."""
    try:
        shown, windows, of, notes = _windows(trace, step)
        paths = critical_paths(shown, windows)
    except TraceError as exc:
        return f"Critical path left out: the trace {exc.problem}."
    path, length = combined(paths)
    summary = summarize(path, length).select(_labelled(), time_us="us", share_pct="pct", edges="edges")
    steps = per_window(paths).select(
        step=pl.when(pl.col("step").is_not_null()).then(pl.col("step").cast(pl.String)).otherwise(pl.col("window")),
        length_us="length_us",
        span_us="span_us",
        before_path_us="before_us",
        after_path_us="after_us",
        window_us="window_us",
        mostly=pl.col("top_bound").replace_strict(BOUND_WORDS, default=pl.col("top_bound"), return_dtype=pl.String),
        share_pct="top_pct",
    )
    split = window_bounds(paths)
    split = split.select(
        window=pl.when(pl.col("step").is_not_null()).then(pl.format("step {}", pl.col("step"))).otherwise(pl.col("window")),
        bound_by="bound_by",
        bound=_labelled(),
        time_us="us",
        share_pct="pct",
    )
    tops = {key: _top(path, length, key) for key in TOPS}
    gpu = trace.kernels.height > 0
    if not gpu:
        notes.append("A CPU-only trace: the path runs through CPU ops and runtime calls only.")
    notes += list(dict.fromkeys(n[0].upper() + n[1:] + "." for cp in paths for n in cp.notes))
    span = sum(cp.span_us for cp in paths)
    return CriticalPathSection(
        paths=paths,
        steps=steps,
        split=split,
        summary=summary,
        tops=tops,
        length_us=length,
        span_us=span,
        verdict=verdict(summary, tops, length / len(paths), len(paths)),
        notes=notes,
        gpu=gpu,
        of=of,
    )


def split_figure(section: CriticalPathSection, title: str = "What bounds each step (critical path)") -> Figure:
    """One horizontal bar per step, stacked by bound (ms); the hover gives the share of that step's path."""
    return bounds_figure(section.split, title)


def bounds_figure(frame: pl.DataFrame, title: str) -> Figure:
    """``window``, ``bound_by``, ``time_us``, ``share_pct`` as one bar per window, stacked by bound."""
    split = frame.filter(pl.col("time_us") > 0)
    windows = list(dict.fromkeys(frame["window"].to_list()))
    bars = []
    for bound in BOUND_BY:
        rows = split.filter(pl.col("bound_by") == bound)
        if rows.height == 0:
            continue
        label = BOUND_WORDS[bound]
        bars.append(
            {
                "type": "bar",
                "y": rows["window"].to_list(),
                "x": (rows["time_us"] / 1000).to_list(),
                "customdata": [units.percent(p / 100) for p in rows["share_pct"].to_list()],
                "orientation": "h",
                "name": label,
                "marker": {"color": BOUND_COLORS[bound]},
                "hovertemplate": "%{y}<br>" + label + ": %{x:,.3f} ms (%{customdata})<extra></extra>",
            }
        )
    return stacked_path_figure(bars, title, windows)


def stacked_path_figure(bars: list[dict[str, Any]], title: str, rows: list[str]) -> Figure:
    """Stacked bars of path time, one bar per step (``rows``, top down)."""
    return figure(
        bars,
        barmode="stack",
        title=title_of(title),
        xaxis={"title": title_of("ms on the critical path")},
        yaxis={"type": "category", "autorange": "reversed", "categoryarray": rows, "categoryorder": "array"},
        legend={"orientation": "h", "y": -0.25, "x": 0, "yanchor": "top", "traceorder": "normal"},
        height=max(300, 40 * len(rows) + 200),
        margin={"l": 90, "r": 20, "t": 50, "b": 40},
    )
