"""``kinetolens diff BASELINE EXPERIMENT``: what changed between two runs.

Each side is a trace file, a run directory (one trace per rank, as
``kinetolens.profile`` or torch-tb-profiler write them) or a logdir holding
exactly one run.  ``--fail-if-slower PCT`` turns the comparison into a CI
gate: exit status 1, with one line saying why, when the experiment's mean
step time is more than PCT percent above the baseline's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from kinetolens.analysis.diff_levels import LEVELS
from kinetolens.cli.checks import WIDTH
from kinetolens.cli.load_options import TraceLoading, trace_load_options
from kinetolens.errors import TraceError
from kinetolens.logdir import one_run

if TYPE_CHECKING:
    from kinetolens.analysis.diff_sums import DiffSums
    from kinetolens.model.trace import Trace
    from kinetolens.runs.windowed_read import WindowedDiffSums

#: Rows shown in the terminal unless ``-t`` says otherwise.
DEFAULT_TOP = 20
#: Levels of the default terminal view after the step categories, and their rows.
DEFAULT_VIEW: tuple[str, ...] = ("op", "kernel")
DEFAULT_VIEW_TOP = 10
#: Table of ``--json``/``--csv``/``--tsv`` when no ``--level`` is given.
DEFAULT_LEVEL = "op"


def side_paths(path: str) -> list[Path]:
    """The trace files one side of the diff stands for."""
    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file or directory")
    if p.is_file():
        return [p]
    return [t.path for t in one_run(p)]


def _side(
    label: str, path: str, loading: TraceLoading, windows: bool | None, exact: bool, read: list[str]
) -> list[Trace | DiffSums]:
    """One side's traces, each read whole, or a step window at a time (its
    sums only) where ``windows`` asks for it or it is too large to hold;
    ``read`` gets a line for each trace read a window at a time, naming the side (``label``)."""

    def in_windows(q: Path, notes: list[str]) -> WindowedDiffSums | None:
        from kinetolens.runs.windowed_read import diff_sums_in_windows  # only for a trace read so

        return diff_sums_in_windows(q, exact, notes=notes)

    out: list[Trace | DiffSums] = []
    for p in side_paths(path):
        windowed = loading.in_windows(p, windows, in_windows)
        if windowed is None:
            out.append(loading.load(str(p)))
        else:
            out.append(windowed.sums)
            read.append(f"{label} {p}: {windowed.read}")
    return out


@click.command("diff")
@click.argument("baseline", type=str)
@click.argument("experiment", type=str)
@click.option(
    "-l", "--level", type=click.Choice(LEVELS), default=None,
    help="Table to show: step breakdown, module, op, op and shapes, kernel "
    f"(default: the top ops and kernels; {DEFAULT_LEVEL} for --json/--csv/--tsv).",
)
@click.option("-t", "--top", type=click.IntRange(min=1), default=None,
              help=f"Rows to show (terminal default {DEFAULT_TOP}, {DEFAULT_VIEW_TOP} per table without --level; "
              "JSON/CSV default all).")
@click.option("--json", "json_", is_flag=True, help="Summary and the level's table as JSON.")
@click.option("--csv", "csv_", is_flag=True, help="The level's table as CSV.")
@click.option("--tsv", is_flag=True, help="The level's table as TSV.")
@click.option("--fail-if-slower", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Exit 1 when the experiment's mean step time is more than PCT% above the baseline's.")
@click.option("--exact-names", is_flag=True, help="Match raw names (keep module instance numbers, hashes, step numbers).")
@click.option("-w", "--width", type=WIDTH, help="Terminal width for the tables.")
@click.option(
    "--windows/--whole", "windows", default=None,
    help="Read each trace a step window at a time (memory bounded by a step), or whole; "
    "default: a step window at a time from 1.5 GB of JSON.",
)
@trace_load_options()
def diff_command(
    baseline: str, experiment: str, level: str | None, top: int | None, json_: bool, csv_: bool, tsv: bool,
    fail_if_slower: float | None, exact_names: bool, width: int | None, loading: TraceLoading,
    windows: bool | None = None,
) -> None:
    """Compare EXPERIMENT with BASELINE per step: first the step-time
    categories that changed most (data loading, GPU kernels, CPU execution,
    ...), then ops and kernels with time and call deltas, what is new and
    gone, and the ops that explain the step-time change.

    Each side is a trace file, a run directory (its ranks are averaged) or a
    logdir with one run.  Times are per step, in the unit each table's
    header names (--json/--csv: microseconds)."""
    # here, not at the top: the command's --help needs neither polars nor rich
    from kinetolens.analysis.diff import compare
    from kinetolens.analysis.diff_environment import environment_warning
    from kinetolens.cli.diff_output import (
        gate,
        print_explained,
        print_lead,
        print_level_table,
        print_summary,
        terminal_columns,
    )
    from kinetolens.cli.render import console as render_console
    from kinetolens.cli.render import echo_notes, emit, emit_json

    machine = json_ or csv_ or tsv
    levels = [level or DEFAULT_LEVEL] if machine else ["step", *([level] if level else DEFAULT_VIEW)]
    read: list[str] = []
    diff = compare(
        _side("baseline", baseline, loading, windows, exact_names, read),
        _side("experiment", experiment, loading, windows, exact_names, read),
        levels=list(dict.fromkeys(levels)),
        exact_names=exact_names,
    )
    echo_notes(read)
    if machine:
        shown_level = level or DEFAULT_LEVEL
        table = diff.tables[shown_level]
        if json_:
            rows = table.head(top) if top else table
            emit_json({"summary": diff.summary, "level": shown_level, "rows": rows.to_dicts()})
        else:
            warning = environment_warning(diff.summary["environment"])
            if warning:  # the table goes to stdout, so the warning to stderr
                click.echo(f"kinetolens: warning: {warning}", err=True)
            emit(table.head(top) if top else table, "csv" if csv_ else "tsv")
    else:
        console = render_console(width)
        print_lead(console, diff)
        print_summary(console, diff, baseline, experiment)
        print_explained(console, diff)
        for shown_level in [level] if level else DEFAULT_VIEW:
            if level == "step":
                break  # the lead table is the step level
            table = diff.tables[shown_level]
            if table.height == 0:
                continue
            shown = terminal_columns(shown_level, table).head(top or (DEFAULT_TOP if level else DEFAULT_VIEW_TOP))
            more = f" (top {shown.height} of {table.height} by |delta|)" if table.height > shown.height else ""
            print_level_table(console, shown, f"{shown_level} per step{more}")
    if fail_if_slower is not None:
        gate(diff, fail_if_slower)
