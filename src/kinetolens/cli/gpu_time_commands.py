"""``kinetolens idle | launches``: where the GPU timeline idles, and what launching costs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
import polars as pl

from kinetolens.analysis.gputime.gpu_streams import rank_of
from kinetolens.analysis.gputime.idle import KERNEL_WAIT_US, idle_tables, idle_work
from kinetolens.analysis.gputime.launch import SHORT_LAUNCH_US, launch_tables, launch_work, launch_work_part
from kinetolens.cli.checks import MICROSECONDS
from kinetolens.cli.load_options import TraceLoading, trace_load_options
from kinetolens.cli.render import emit, emit_json
from kinetolens.errors import TraceError
from kinetolens.analysis.session import whole_steps
from kinetolens.model.trace import Trace

if TYPE_CHECKING:
    from collections.abc import Callable

    from kinetolens.runs.windowed_read import WindowedWork
from kinetolens.registry.kernel_names import short_names

#: Rows of the short-kernel table shown in the terminal.
SHORT_ROWS = 15


#: Why a trace cannot be shown by the GPU time commands.
NO_GPU_WORK = "has no GPU kernels, memcpys or memsets to analyze"


def _trace(path: str, loading: TraceLoading, keep_last_step: bool) -> Trace:
    trace = loading.load(path)
    if trace.kernels.height == 0:
        raise TraceError(path, NO_GPU_WORK)
    return trace if keep_last_step else whole_steps(trace)


def _work_in_windows(
    path: str, windows: bool | None, keep_last_step: bool, loading: TraceLoading,
    part_of: Callable[[Trace, tuple[int, int], int], pl.DataFrame],
) -> WindowedWork | None:
    """The GPU work a command's tables read (``part_of`` each window), read a
    step window at a time where ``windows`` asks for it or the trace is too
    large to hold (None: read it whole)."""
    from kinetolens.runs.windowed_read import work_in_windows

    def read(p: Path, notes: list[str]) -> WindowedWork | None:
        return work_in_windows(p, part_of, keep_last_step, notes=notes)

    return loading.in_windows(path, windows, read)


def _idle_part(trace: Trace, own: tuple[int, int], part: int) -> pl.DataFrame:
    """A window's idle work (it numbers nothing that must be made unique, so the part's number is not needed)."""
    return idle_work(trace, own)


#: What a table's shares are of, where another view reports the same kind of figure over another window.
CAPTIONS = {
    "temporal_breakdown": (
        "pct: of the kernel span, the first kernel's start to the last kernel's end (HTA's temporal "
        "breakdown); summary's GPU util is of the steps' wall time"
    ),
}


def _emit_tables(
    tables: dict[str, pl.DataFrame], json_: bool, csv: bool, optional: tuple[str, ...] = (), compact: bool = False
) -> None:
    """Terminal tables, one JSON object of row lists, or CSV sections headed ``# name``.

    Tables named in ``optional`` are left out of the terminal when empty.
    With ``compact``, a terminal table's ``_us`` suffixes move to its title
    and a rank column holding one rank is left out, which leaves the values
    room on a 100-column terminal.
    """
    if json_:
        emit_json(tables)
        return
    for name, frame in tables.items():
        if csv:
            click.echo(f"# {name}")
            emit(frame, "csv")
        elif frame.height or name not in optional:
            title = name.replace("_", " ")
            frame = _for_terminal(frame)
            if compact and "rank" in frame.columns and frame["rank"].n_unique() <= 1:
                frame = frame.drop("rank")
            if compact and any(c.endswith("_us") for c in frame.columns):
                frame = frame.rename(lambda c: c.removesuffix("_us"))
                title += " (µs)"
            emit(frame, "table", title=title, caption=CAPTIONS.get(name))


def _for_terminal(frame: pl.DataFrame) -> pl.DataFrame:
    """Floats to 3 decimals, kernel names in their short form (the renderer fits them to the width)."""
    frame = frame.with_columns(pl.col(pl.Float64).round(3))
    if "name" in frame.columns:
        frame = frame.with_columns(short_names(frame["name"]).alias("name"))
    return frame


_keep_last_step = click.option(
    "--keep-last-step", is_flag=True,
    help="Keep the last ProfilerStep even when the profiler cut it short (by default such a step is dropped).",
)
_windows = click.option(
    "--windows/--whole", "windows", default=None,
    help="Read the trace a step window at a time (memory bounded by a step and the GPU work's own columns), or whole; "
    "default: a step window at a time from 1.5 GB of JSON.",
)
_json = click.option("--json", "json_", is_flag=True, help="All tables as one JSON object (see docs/idle.md).")
_csv = click.option("--csv", is_flag=True, help="All tables as CSV, each after a '# name' line.")


@click.command("idle")
@click.argument("trace", type=str)
@_json
@_csv
@click.option("--kernel-wait-us", type=MICROSECONDS, default=KERNEL_WAIT_US, show_default=True,
              help="Gaps shorter than this between queued work count as launch overhead (kernel_wait).")
@_keep_last_step
@_windows
@trace_load_options()
def idle_command(
    trace: str, json_: bool, csv: bool, kernel_wait_us: float, keep_last_step: bool, loading: TraceLoading,
    windows: bool | None = None,
) -> None:
    """GPU busy / idle time, kernel types and their overlap, and why each stream idles."""
    read = _work_in_windows(trace, windows, keep_last_step, loading, _idle_part)
    if read is not None:
        if not read.gpu:
            raise TraceError(trace, NO_GPU_WORK)
        work, rank = read.work, read.rank
    else:
        t = _trace(trace, loading, keep_last_step)
        work, rank = idle_work(t), rank_of(t)
    _emit_tables(idle_tables(work, rank, kernel_wait_us), json_, csv, compact=True)
    if read is not None and not (json_ or csv):
        click.echo(read.read)


@click.command("launches")
@click.argument("trace", type=str)
@_json
@_csv
@click.option("--short-us", type=MICROSECONDS, default=SHORT_LAUNCH_US, show_default=True,
              help="Short kernels: those running shorter than a launch call of at most this many µs.")
@_keep_last_step
@_windows
@trace_load_options()
def launches_command(
    trace: str, json_: bool, csv: bool, short_us: float, keep_last_step: bool, loading: TraceLoading,
    windows: bool | None = None,
) -> None:
    """Launch cost and delay per launch call, launch-bound kernels, graph launches, queue depth, copy bandwidth."""
    read = _work_in_windows(trace, windows, keep_last_step, loading, launch_work_part)
    if read is not None:
        if not read.gpu:
            raise TraceError(trace, NO_GPU_WORK)
        work = read.work
    else:
        work = launch_work(_trace(trace, loading, keep_last_step))
    tables = launch_tables(work, short_us)
    if not (json_ or csv):
        tables["short_kernels"] = tables["short_kernels"].head(SHORT_ROWS)
    _emit_tables(tables, json_, csv, optional=("multi_kernel_launches",), compact=True)
    if read is not None and not (json_ or csv):
        click.echo(read.read)
