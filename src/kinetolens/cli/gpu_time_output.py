"""What ``kinetolens idle`` and ``kinetolens launches`` read (the trace whole,
or its GPU work a step window at a time) and how they print their tables
(the commands themselves are :mod:`kinetolens.cli.gpu_time_commands`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click
import polars as pl

from kinetolens.analysis.gputime.idle import idle_work
from kinetolens.analysis.session import whole_steps
from kinetolens.cli.load_options import TraceLoading
from kinetolens.cli.render import emit, emit_json
from kinetolens.errors import TraceError
from kinetolens.model.trace import Trace
from kinetolens.registry.kernel_names import short_names

if TYPE_CHECKING:
    from kinetolens.runs.windowed_read import WindowedWork


#: Why a trace cannot be shown by the GPU time commands.
NO_GPU_WORK = "has no GPU kernels, memcpys or memsets to analyze"


def gpu_trace(path: str, loading: TraceLoading, keep_last_step: bool) -> Trace:
    trace = loading.load(path)
    if trace.kernels.height == 0:
        raise TraceError(path, NO_GPU_WORK)
    return trace if keep_last_step else whole_steps(trace)


def gpu_work_in_windows(
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


def idle_part(trace: Trace, own: tuple[int, int], part: int) -> pl.DataFrame:
    """A window's idle work (it numbers nothing that must be made unique, so the part's number is not needed)."""
    return idle_work(trace, own)


#: What a table's shares are of, where another view reports the same kind of figure over another window.
CAPTIONS = {
    "temporal_breakdown": (
        "pct: of the kernel span, the first kernel's start to the last kernel's end (HTA's temporal "
        "breakdown); summary's GPU util is of the steps' wall time"
    ),
}


def emit_tables(
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
