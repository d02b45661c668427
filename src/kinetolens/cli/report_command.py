"""``kinetolens report``: one trace (or one rank of a run) as an HTML or markdown report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kinetolens.cli.load_options import TraceLoading, strict_option, trace_load_options
from kinetolens.errors import TraceError

if TYPE_CHECKING:
    from kinetolens.analysis.summary_types import Summary
    from kinetolens.model.trace import Trace
    from kinetolens.runs.windowed_read import WindowedRead


@click.command("report")
@click.argument("trace_or_run", type=str)
@click.option("-o", "--output", default=None, help="Output file (default: report.html; markdown goes to stdout).")
@click.option("--format", "fmt", type=click.Choice(["html", "md"]), default=None,
              help="html (self-contained, charts included) or md. Default: from -o's suffix, else html.")  # fmt: skip
@click.option("--title", default=None, help="Report title (default: the trace file's name).")
@click.option(
    "--windows/--whole", "windows", default=None,
    help="Read the trace a step window at a time (memory bounded by a step; the op and kernel tables "
    "cover every step, the other sections a sample of them, as the report says), or whole; "
    "default: a step window at a time from 1.5 GB of JSON.",
)
@trace_load_options(capture=True)
@strict_option
def report_command(
    trace_or_run: str, output: str | None, fmt: str | None, title: str | None, loading: TraceLoading, strict: bool,
    windows: bool | None = None,
) -> None:
    """Overview, recommendations, top ops, kernels, modules, roofline, memory
    and GPU idle time of TRACE_OR_RUN in one file.

    TRACE_OR_RUN is a trace file or a run directory; a run of several ranks
    gets a cross-rank section (step time per rank and its spread,
    collectives, stragglers: the kinetolens dist numbers; the critical
    path across ranks: kinetolens critical-path RUNDIR) and the rest
    is its first rank, in full, as the report says.  HTML is one
    self-contained file (plotly.js embedded, opens offline); md is for
    terminals, pull requests and CI summaries (stdout without -o).
    """
    from kinetolens.views.report_data import (  # plotly: only for reports
        collect,
        resolve_target,
    )

    if fmt is None:
        fmt = "md" if output and Path(output).suffix.lower() in (".md", ".markdown") else "html"
    from kinetolens.cli.render import echo_notes

    path, note = resolve_target(trace_or_run)
    ranks, graphs = None, None
    if note is not None:  # a run of several ranks: every rank, side by side, and the path across them
        from kinetolens.runs.graphs import run_summaries_and_graphs

        notes: list[str] = []
        ranks, graphs = run_summaries_and_graphs(trace_or_run, cache=loading.cache, notes=notes, strict=strict)
        echo_notes(notes)
        note = " ".join([note, *(f"{line}." for line in notes)])
    read = _in_windows(path, loading, windows)
    if read is not None:
        assert read.tables is not None
        data = collect(read.sample, title=title, note=note, ranks=ranks, graphs=graphs, summary=read.summary,
                       whole=read.tables, sampled=read.sampled)  # fmt: skip
    else:
        trace, summary = _trace_and_summary(str(path), loading)
        data = collect(trace, title=title, note=note, ranks=ranks, graphs=graphs, summary=summary)
    if fmt == "md":
        from kinetolens.views.report_md import render_md

        text = render_md(data)
        if output is None:
            sys.stdout.write(text)
            return
        try:
            Path(output).parent.mkdir(parents=True, exist_ok=True)
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise TraceError(output, f"cannot write report ({exc.strerror or exc})") from None
    else:
        from kinetolens.views.report_html import write_html

        output = output or "report.html"
        write_html(data, output)
    click.echo(f"kinetolens report: wrote {output}", err=True)


def _in_windows(path: Path, loading: TraceLoading, windows: bool | None) -> WindowedRead | None:
    """The report's figures read a step window at a time where ``windows``
    asks for it (None: from the trace's size), else None; the summary is kept
    with the trace's cache entry, as ``kinetolens summary --windows`` keeps it."""
    from kinetolens.analysis.summary_types import Summary
    from kinetolens.runs.windowed_read import report_in_windows

    read = loading.in_windows(path, windows, lambda p, notes: report_in_windows(p, notes=notes))
    if read is not None:
        name = "summary" if windows is None else "summary_windows"
        loading.derived(str(path), name, lambda trace: read.summary, Summary, from_file=lambda p: read.summary)
    return read


def _trace_and_summary(path: str, loading: TraceLoading) -> tuple[Trace, Summary]:
    """The trace and its summary, the summary kept with the trace's cache
    entry as ``kinetolens summary`` keeps it: a report after a summary (or a
    summary after a report) does not compute it twice.  A summary read back
    from the cache leaves the trace to load; one computed here loaded it."""
    from kinetolens.analysis.summary_types import Summary
    from kinetolens.cli.summary_output import summarized

    loaded: list[Trace] = []

    def summary_of(trace: Trace) -> Summary:
        loaded.append(trace)
        return summarized(trace)

    summary = loading.derived(path, "summary", summary_of, Summary)
    return (loaded[0] if loaded else loading.load(path)), summary
