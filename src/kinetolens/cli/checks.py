"""Option values checked before they can silently empty a table.

A count of 0 rows, a step the trace does not have, a regex that does not
parse or a threshold below zero would otherwise print an empty (or wrong)
table and exit 0, or a polars traceback.  Each check fails with a
:class:`click.BadParameter`, which the main entry point prints as one line
with exit status 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from kinetolens.errors import TraceError

if TYPE_CHECKING:
    from kinetolens.model.trace import Trace

#: Row counts (-t/--top, -n/--limit): 0 would only print an empty table.
ROWS = click.IntRange(min=1)
#: Terminal widths (-w): rich prints nothing at all at 0.
MIN_WIDTH = 20
WIDTH = click.IntRange(min=MIN_WIDTH)
#: Time thresholds in microseconds.
MICROSECONDS = click.FloatRange(min=0)


def regex(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A ``--name`` pattern, checked with the regex engine that will run it (polars')."""
    if value is None:
        return None
    import polars as pl  # only when a pattern is given: the CLI's help starts without polars

    try:
        pl.Series([""]).str.contains(value)
    except pl.exceptions.PolarsError as exc:
        lines = [line.strip() for line in str(exc).splitlines()]
        why = next((line[len("error: ") :] for line in lines if line.startswith("error: ")), lines[0] if lines else "")
        raise click.BadParameter(f"{value!r} is not a valid regular expression ({why})") from None
    return value


def _listed(steps: list[int]) -> str:
    if steps == list(range(steps[0], steps[-1] + 1)) and len(steps) > 2:
        return f"{steps[0]} to {steps[-1]}"
    shown = ", ".join(map(str, steps[:10]))
    return shown + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")


def check_step(path: str, trace: Trace, step: int | None) -> None:
    """``--step N`` must name one of the trace's ProfilerStep ranges."""
    if step is None:
        return
    steps = sorted(trace.steps["step"].drop_nulls().unique().to_list()) if trace.steps.height else []
    if step in steps:
        return
    if not steps:
        has = "it has no ProfilerStep ranges"
    else:
        has = f"its only step is {steps[0]}" if len(steps) == 1 else f"its steps are {_listed(steps)}"
    raise click.BadParameter(f"{path} has no step {step}; {has}", param_hint="'--step'")


def check_time_range(min_time: float | None, max_time: float | None) -> None:
    if min_time is not None and max_time is not None and min_time > max_time:
        raise click.BadParameter(
            f"--min-time {min_time:g} is above --max-time {max_time:g}: no row can match", param_hint="'--min-time'"
        )


def no_kernels(what: str = "to list") -> str:
    """What is said of a trace without GPU activity (a CPU-only profile)."""
    return f"has no GPU kernels, memcpys or memsets {what} (a CPU-only profile?)"


def require_kernels(path: str, trace: Trace, what: str = "to list") -> None:
    """A trace without GPU activity (a CPU-only profile) is named, not shown as an empty table."""
    if trace.kernels.height == 0:
        raise TraceError(path, no_kernels(what))


def one_line(text: Any) -> str:
    """Click's messages, folded onto one line."""
    return " ".join(str(text).split())
