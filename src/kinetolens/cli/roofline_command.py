"""``kinetolens roofline``: which ops and modules lose the most time to their roofline."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from kinetolens.cli.checks import WIDTH
from kinetolens.cli.load_options import TraceLoading, trace_load_options
from kinetolens.errors import TraceError

if TYPE_CHECKING:
    from kinetolens.model.trace import Trace
    from kinetolens.registry.gpus import GpuSpec
    from kinetolens.runs.windowed_read import WindowedRoofline

#: Groupings of ``kinetolens roofline --by``.
GROUPINGS = ("op", "module")


@click.command("roofline")
@click.argument("trace", type=str)
@click.option("-o", "--output", default=None, help="Draw the roofline chart to .html (self-contained), .svg or .png.")
@click.option("--by", type=click.Choice(GROUPINGS), default="op", show_default=True, help="Group op calls by op name or module.")
@click.option("--peak-tflops", type=click.FloatRange(min=0, min_open=True), default=None, help="One compute ceiling (TFLOP/s) for every precision.")
@click.option("--peak-gbps", type=click.FloatRange(min=0, min_open=True), default=None, help="DRAM bandwidth ceiling (GB/s).")
@click.option("--spec", "spec_file", default=None, help="GPU spec file (TOML or JSON) overriding the table.")
@click.option("-n", "--top", type=click.IntRange(min=1), default=20, show_default=True, help="Rows in the terminal table.")
@click.option("--csv", "csv_", is_flag=True, help="CSV output, every row and column.")
@click.option("--json", "json_", is_flag=True, help="JSON records, every row and column.")
@click.option("-w", "--width", type=WIDTH, help="Terminal width for the table.")
@click.option(
    "--windows/--whole", "windows", default=None,
    help="Read the trace a step window at a time (memory bounded by a step and the op calls on the roofline), "
    "or whole; default: a step window at a time from 1.5 GB of JSON.",
)
@trace_load_options(capture=True, ncu=True)
def roofline_command(
    trace: str, output: str | None, by: str, peak_tflops: float | None, peak_gbps: float | None,
    spec_file: str | None, top: int, csv_: bool, json_: bool, width: int | None,
    loading: TraceLoading, windows: bool | None = None,
) -> None:  # fmt: skip
    """Time each op (or module) loses to its roofline in TRACE.

    Roof: min(peak FLOP/s of the precision it ran in, intensity x DRAM
    bandwidth), with the GPU's dense peaks from the spec table.  lost_us is
    device time minus the time at 100% of the roof; lost_75_us against a
    realistic 75%.  Rows are sorted by lost_us.
    """
    # here, not at the top: the command's --help needs neither polars nor rich
    import textwrap
    from pathlib import Path

    from rich.text import Text

    from kinetolens.analysis.hardware.gpu_spec import gpu_spec
    from kinetolens.analysis.hardware.roofline import REALISTIC, op_roofline, require_roofs, roofline_by, roofline_of
    from kinetolens.analysis.session import warnings_of
    from kinetolens.analysis.workload.work import FORMULA_FAILED
    from kinetolens.cli.render import console as render_console
    from kinetolens.cli.render import emit
    from kinetolens.cli.roofline_output import caveat_lines, print_roofline_table, sentence_time, why_empty, write_chart
    from kinetolens.ingest.gpu_spec_file import read_spec_file
    from kinetolens.views import units

    fields = read_spec_file(spec_file) if spec_file is not None else None  # a bad file stops before the load

    def spec_of(t: Trace) -> GpuSpec:
        return require_roofs(gpu_spec(t, spec_fields=fields, peak_tflops=peak_tflops, peak_gbps=peak_gbps), t)

    read = _in_windows(trace, windows, spec_of, loading)
    if read is not None:
        t, spec, ops, failed, read_notes = read.first, read.spec, read.ops, read.warnings, [read.read]
        table = roofline_of(ops, spec, by, read.calls)
    else:
        t = loading.load(trace)
        spec = spec_of(t)
        ops = op_roofline(t, spec)
        table = roofline_by(t, spec, by=by)
        failed, read_notes = [w for w in warnings_of(t) if w.kind == FORMULA_FAILED], []
    if table.height == 0 and (output or not (json_ or csv_)):  # machine formats: an empty list
        raise TraceError(trace, f"nothing to put on a roofline: {why_empty(t, ops)}")
    if output:
        write_chart(output, ops, spec, f"Roofline: {Path(trace).name} on {spec.name}")
    if json_ or csv_:
        emit(table, "json" if json_ else "csv")
        return
    dropped = print_roofline_table(table.head(top), f"kinetolens roofline: {trace} (by {by})", width)
    total, lost = float(table["device_us"].sum()), float(table["lost_us"].sum())
    lost75 = float(table["lost_75_us"].sum())
    note = f"; chart: {output}" if output else ""
    console = render_console(width)
    lines = [
        f"{spec.name} ({spec.origin}): DRAM {spec.dram_gbps:,.0f}\u00a0GB/s. Ops with a roofline: {sentence_time(total)} on "
        f"the GPU, {sentence_time(lost)} lost to the roof, {sentence_time(lost75)} below {REALISTIC:.0%} of it{note}",
        *caveat_lines(ops),
        *(note for note in (units.beats_model_note(table.head(top), by if by in table.columns else table.columns[0]),) if note),
        *(f"warning: {w}" for w in failed),
        *read_notes,
    ]
    if dropped:
        lines.append(f"Not shown at this width: {', '.join(dropped)} (wider terminal or -w; --json/--csv have every column).")
    for line in lines:  # wrapped here: rich would break a line at the no-break space between a number and its unit
        console.print(Text(textwrap.fill(line, console.width - 1, break_on_hyphens=False)))


def _in_windows(trace: str, windows: bool | None, spec_of: Callable[[Trace], GpuSpec], loading: TraceLoading) -> WindowedRoofline | None:
    """The op calls on the roofline read a step window at a time where
    ``windows`` asks for it (None: from the trace's size), else None."""
    from kinetolens.runs.windowed_read import roofline_in_windows

    return loading.in_windows(trace, windows, lambda path, notes: roofline_in_windows(path, spec_of, notes=notes))
