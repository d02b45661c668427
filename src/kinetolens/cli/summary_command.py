"""``kinetolens summary``: what a trace is, and how well its kernels are
attributed (the terminal view is :mod:`kinetolens.cli.summary_output`)."""

from __future__ import annotations

import os

import click

from kinetolens.cli.checks import WIDTH
from kinetolens.cli.load_options import TraceLoading, trace_load_options
from kinetolens.logdir import one_run


@click.command("summary")
@click.argument("trace", type=str)
@click.option("--json", "json_", is_flag=True, help="Stable JSON (see docs/summary-json.md).")
@click.option("-w", "--width", type=WIDTH, default=None, help="Terminal width for the tables.")
@click.option(
    "--windows/--whole", "windows", default=None,
    help="Read TRACE a step window at a time (memory bounded by a step), or whole; "
    "default: a step window at a time from 1.5 GB of JSON.",
)
@trace_load_options(capture=True)
def summary_command(
    trace: str, json_: bool, loading: TraceLoading, width: int | None = None, windows: bool | None = None
) -> None:
    """What TRACE is, and how well its kernels are attributed.

    TRACE may be a run's folder (what kinetolens run writes): each rank's
    trace is summarised in turn (kinetolens dist RUNDIR compares them)."""
    # here, not at the top: the command's --help needs neither polars nor rich
    from kinetolens.cli.render import console as render_console
    from kinetolens.cli.render import emit_json
    from kinetolens.cli.summary_output import print_summary, summary_of

    if os.path.isdir(trace):  # False, not an error, where the path cannot be read: the loader says why
        paths = [str(w.path) for w in one_run(trace)]
        if json_:
            emit_json([summary_of(p, loading, windows) for p in paths])
            return
        for p in paths:
            print_summary(p, loading, width, windows)
        if len(paths) > 1:
            render_console(width).print(
                f"{len(paths)} traces in {trace}: kinetolens dist {trace} compares the ranks (step spread, "
                "collectives, stragglers)", markup=False, highlight=False,
            )
        return
    if json_:
        emit_json(summary_of(trace, loading, windows))
        return
    print_summary(trace, loading, width, windows)
