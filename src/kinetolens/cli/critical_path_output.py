"""The terminal and JSON view of ``kinetolens critical-path`` for one trace
(the command itself is :mod:`kinetolens.cli.critical_path_command`)."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kinetolens.analysis.paths.critical_path import (
    CriticalPath,
    Window,
    annotation_window,
    combined,
    critical_paths,
    per_window,
    step_window,
    step_windows,
    summarize,
    top_items,
)
from kinetolens.cli.load_options import TraceLoading
from kinetolens.registry.words import counted
from kinetolens.cli.render import console as render_console
from kinetolens.cli.render import emit_json
from kinetolens.errors import TraceError
from kinetolens.model.trace import Trace
from kinetolens.analysis.session import whole_steps
from kinetolens.registry.kernel_names import short_names
from kinetolens.views.units import duration, in_unit, middle, percent, time_unit
from kinetolens.model.vocabulary import BOUND_WORDS as LABELS

#: Bounds whose path edges are named after a GPU activity.
GPU_BOUNDS = ("launch_overhead", "kernel_gap", "gpu_compute", "gpu_memory", "communication")
#: Longest name shown in the terminal (kernel signatures run to thousands of characters).
NAME_CHARS = 60
MAX_STEP_ROWS = 12


def _short(name: str | None, chars: int = NAME_CHARS) -> str:
    return middle(name or "-", chars)


def _path_json(cp: CriticalPath) -> dict:
    w = cp.window
    return {
        "window": {"label": w.label, "step": w.step, "start_ns": w.start, "end_ns": w.end},
        "length_us": cp.length_us,
        "span_us": cp.span_us,
        "untraced_us": cp.untraced_us,
        "before_us": cp.before_us,
        "after_us": cp.after_us,
        "window_us": cp.window_us,
        "nodes": cp.nodes,
        "edges": cp.edges,
        "summary": cp.summary.to_dicts(),
        "notes": cp.notes,
        "path": cp.path.to_dicts(),
    }


def _print(console: Console, paths: list[CriticalPath], summary: pl.DataFrame, length: float, tops: dict[str, pl.DataFrame]) -> None:
    span = sum(cp.span_us for cp in paths)
    if len(paths) == 1:
        title = f"Critical path of {paths[0].window.label}"
    else:
        title = f"Critical path of {len(paths)} steps"
        _print_steps(console, paths)
    console.print(Text(title, style="bold"))
    console.print(
        f"length {duration(length)}, span {duration(span)} ({duration(max(span - length, 0.0))} untraced between ops)"
    )
    window, before, after = (sum(getattr(cp, f) for cp in paths) for f in ("window_us", "before_us", "after_us"))
    console.print(f"window {duration(window)}: {duration(before)} before the path, {duration(after)} after it")
    for note in dict.fromkeys(n for cp in paths for n in cp.notes):
        console.print(Text(f"note: {note}", style="yellow"))
    unit, scale = time_unit(summary["us"].max())  # one unit a column, named in its header
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", collapse_padding=True)
    for header, justify in (("bound by", "left"), (f"time {unit}", "right"), ("share", "right"), ("edges", "right")):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for row in summary.iter_rows(named=True):
        table.add_row(LABELS.get(row["bound_by"], row["bound_by"]), in_unit(row["us"], scale), percent(row["pct"] / 100), f"{row['edges']:,}")
    console.print(table)
    # The name takes what the bound, time and share columns leave.
    chars = max(16, min(NAME_CHARS, console.width - 37))
    shown = (("name", "On the path"), ("op", "By op"), ("module", "By module"), ("source", "By source line"))
    for by, header in shown:
        frame = tops[by]
        if frame.height == 0:
            continue
        if by == "name":  # kernels by their short names (the JSON keeps the full ones)
            gpu = pl.col("bound_by").is_in(GPU_BOUNDS)
            frame = frame.with_columns(pl.when(gpu).then(short_names(frame["name"])).otherwise(pl.col("name")).alias("name"))
        t = Table(title=header, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold", collapse_padding=True)
        t.add_column(by, no_wrap=True)
        t.add_column("bound by", no_wrap=True, min_width=max(len(LABELS.get(b, b)) for b in frame["bound_by"]))
        unit, scale = time_unit(frame["us"].max())
        t.add_column(f"time {unit}", justify="right", no_wrap=True, min_width=9)
        t.add_column("share", justify="right", no_wrap=True, min_width=6)
        for row in frame.iter_rows(named=True):
            t.add_row(Text(_short(row[by], chars)), LABELS.get(row["bound_by"], row["bound_by"]), in_unit(row["us"], scale), percent(row["pct"] / 100))
        console.print(t)


def _print_steps(console: Console, paths: list[CriticalPath]) -> None:
    frame = per_window(paths)
    t = Table(title="Per step", title_justify="left", box=box.SIMPLE_HEAD, header_style="bold", collapse_padding=True)
    unit, scale = time_unit(frame["span_us"].max())
    for header, justify in (("step", "left"), (f"length {unit}", "right"), (f"span {unit}", "right"), ("mostly", "left"), ("share", "right")):
        t.add_column(header, justify=justify)  # type: ignore[arg-type]
    rows = frame.to_dicts()
    for row in rows[:MAX_STEP_ROWS]:
        t.add_row(
            str(row["step"]) if row["step"] is not None else row["window"],
            in_unit(row["length_us"], scale),
            in_unit(row["span_us"], scale),
            LABELS.get(row["top_bound"] or "", row["top_bound"] or "-"),
            percent(row["top_pct"] / 100) if row["top_pct"] is not None else "-",
        )
    if len(rows) > MAX_STEP_ROWS:
        t.add_row(f"+{len(rows) - MAX_STEP_ROWS}", "", "", "", "")
    console.print(t)


def _in_windows(trace: str, step: int | None, windows: bool | None, loading: TraceLoading) -> Trace | None:
    """The window of ``step`` (or the sample of whole steps), read a step window
    at a time where ``windows`` asks for it (None: from the trace's size), and
    a note on stderr saying so; None to read the trace whole."""
    from kinetolens.runs.windowed_read import steps_in_windows

    def read(path: Path, notes: list[str]) -> Trace | None:
        steps = steps_in_windows(path, step, notes=notes)
        if steps is None:
            return None
        notes.append(f"{trace}: read a step window at a time: the critical path of {steps.sampled}")
        return steps.trace

    return loading.in_windows(trace, windows, read)


def show_trace(
    trace: str,
    step: int | None,
    annotation: str | None,
    instance: int,
    top: int,
    json_: bool,
    width: int | None,
    perfetto: str | None,
    keep_last_step: bool,
    loading: TraceLoading,
    windows: bool | None = None,
) -> None:
    """One trace's critical path per step (or per ``annotation`` window), printed or as JSON;
    ``windows``: read a step window at a time (None: from the trace's size)."""
    # --perfetto writes the whole trace with its path: a window would write part of it
    whole = annotation is not None or keep_last_step or perfetto is not None
    read = None if whole else _in_windows(trace, step, windows, loading)
    t = read if read is not None else loading.load(trace)
    if step is None and annotation is None and not keep_last_step:
        t = whole_steps(t)
    windows: list[Window]
    if annotation is not None:
        windows = [annotation_window(t, annotation, instance)]
    elif step is not None:
        windows = [step_window(t, step)]
    else:
        windows = step_windows(t)
    if not windows:
        raise TraceError(trace, "has no step to analyse")
    paths = critical_paths(t, windows)
    path, length = combined(paths)
    summary = summarize(path, length)
    tops = {by: top_items(path, by, length, top) for by in ("name", "op", "module", "source")}
    if perfetto is not None:
        from kinetolens.views.critical_path_perfetto import write_trace_with_path

        count = write_trace_with_path(t, paths, LABELS, perfetto)
        click.echo(f"wrote {perfetto} ({counted(count, 'event')}; the path is the 'critical path' process)", err=True)
    # An op's own time and its name are the same row twice: "By op" is for the kernels and calls they launch.
    if json_:
        emit_json(
            {
                "windows": per_window(paths).to_dicts(),
                "length_us": length,
                "summary": summary.to_dicts(),
                "top": {by: frame.to_dicts() for by, frame in tops.items()},
                "paths": [_path_json(cp) for cp in paths],
            }
        )
        return
    _print(render_console(width), paths, summary, length, tops)


