"""``kinetolens roofline``: which ops and modules lose the most time to their roofline."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click
import polars as pl
from rich.table import Table
from rich.text import Text

from kinetolens.analysis.session import warnings_of
from kinetolens.analysis.hardware.roofline import (
    GROUPINGS,
    REALISTIC,
    ceiling_caveats,
    op_roofline,
    require_roofs,
    roofline_by,
    roofline_of,
)
from kinetolens.analysis.workload.work import FORMULA_FAILED
from kinetolens.cli.checks import WIDTH
from kinetolens.cli.load_options import TraceLoading, trace_load_options
from kinetolens.analysis.trace_kind import trace_kind
from kinetolens.cli.render import console as render_console
from kinetolens.cli.render import emit, print_heading
from kinetolens.errors import TraceError
from kinetolens.ingest.gpu_spec_file import read_spec_file
from kinetolens.registry.gpus import GpuSpec
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.model.trace import Trace
from kinetolens.views import empty_reasons, units

if TYPE_CHECKING:
    from kinetolens.runs.windowed_read import WindowedRoofline


def _num(v: float) -> str:
    """Three significant figures or so, whatever the magnitude."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


#: (column, header, format) of the terminal table after the key; JSON and CSV carry every column.
#: Time columns show in one unit per table (``us`` in their headers becomes it).
TERMINAL_COLUMNS = [
    ("calls", "calls", "{:,}".format), ("device_us", "device us", None), ("pct_of_roof", "% of roof", "{:.1f}".format),
    ("lost_us", "lost us", None), ("lost_75_us", f"lost us at {REALISTIC:.0%}", None), ("intensity", "FLOP/B", _num),
    ("achieved_tflops", "TFLOP/s", _num), ("bound", "bound", str), ("roof", "precision", str),
]  # fmt: skip
#: Measured DRAM bytes over modeled, shown where the trace has CUPTI counters.
MEASURED_COLUMNS = [("bytes_ratio", "bytes_ratio", "{:.3f}".format)]
#: Columns a narrow terminal leaves out, first to go first, so the key keeps ``MIN_KEY`` characters.
NARROW_DROPS = ("lost_75_us", "intensity", "bound")
MIN_KEY = 24
#: Module paths are long; the terminal shows their tail (the layer).
KEY_CHARS = 70


def _roof_label() -> pl.Expr:
    """Precision and the unit whose peak is the roof: ``bf16 TC`` (Tensor /
    Matrix Cores), ``bf16 TC*`` (assumed), ``fp32 ?`` (no ceiling), ``bf16``
    (CUDA-core / vector peak)."""
    unit = (
        pl.when(pl.col("flops") <= 0)
        .then(pl.lit(""))
        .when(pl.col("ceiling").is_null())
        .then(pl.lit(" ?"))
        .when(pl.col("ceiling").str.ends_with(" tensor"))
        .then(pl.when(pl.col("assumed_us") > 0).then(pl.lit(" TC*")).otherwise(pl.lit(" TC")))
        .otherwise(pl.lit(""))
    )
    return (pl.col("precision").fill_null("-") + unit).alias("roof")


def _time(us: float) -> str:
    """A time in a sentence: its number and unit kept on one line."""
    return units.duration(us).replace(" ", "\u00a0")


def _time_unit(table: pl.DataFrame) -> tuple[str, float]:
    """The one time unit of the table: that of its biggest device time."""
    return units.time_unit(float(table["device_us"].max() or 0.0) if table.height else 0.0)


def _print_table(table: pl.DataFrame, title: str, width: int | None) -> list[str]:
    """The terminal table, fitted to ``width``; returns the headers it left out."""
    key = table.columns[0]
    shown = table.with_columns(_roof_label())
    unit, scale = _time_unit(shown)
    cols = [
        (c, header.replace(" us", f" {unit}"), fmt or (lambda v, s=scale: units.in_unit(v, s)))
        for c, header, fmt in TERMINAL_COLUMNS + [c for c in MEASURED_COLUMNS if c[0] in table.columns]
    ]
    cells = {c: ["-" if v is None else fmt(v) for v in shown[c].to_list()] for c, _, fmt in cols}
    sizes = {c: max([len(w) for w in header.split()] + [len(v) for v in cells[c]]) for c, header, _ in cols}
    console = render_console(width)
    print_heading(console, title)
    keys = [str(k) for k in shown[key].to_list()]
    floor = min(MIN_KEY, 12)  # the key column is never narrower
    want = max(floor, min(MIN_KEY, max([len(key), *(len(k) for k in keys)])))  # short keys leave room for columns
    dropped = []
    for c in NARROW_DROPS:
        free = console.width - 1 - sum(sizes[c2] + 3 for c2, _, _ in cols) - 3
        if free >= want:
            break
        dropped += [h for c2, h, _ in cols if c2 == c]
        cols = [col for col in cols if col[0] != c]
    free = console.width - 1 - sum(sizes[c] + 3 for c, _, _ in cols) - 3
    tail = max(min(KEY_CHARS, free, max(len(k) for k in [key, *keys])), floor)  # one line per row
    out = Table(header_style="bold")
    out.add_column(key, no_wrap=True, overflow="crop", min_width=tail, max_width=tail)
    for c, header, _ in cols:
        justify = "left" if c in ("bound", "roof") else "right"
        out.add_column(header, justify=justify, min_width=sizes[c], max_width=sizes[c])  # headers wrap, values never
    for i, k in enumerate(keys):
        out.add_row(Text(units.middle(k, tail)), *(Text(cells[c][i]) for c, _, _ in cols))
    console.print(out)
    return dropped


def _caveat_lines(ops: pl.DataFrame) -> list[str]:
    """One line per kind of compute ceiling that is not known from the trace."""
    lines = []
    for kind, calls, device_us, names in ceiling_caveats(ops).iter_rows():
        which = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        calls_text = f"{calls:,} call{'s' * (calls != 1)} ({device_us:,.1f} us; {which})"
        if kind == "assumed":
            lines.append(
                f"TC*: Tensor Core peak assumed for {calls_text}: the kernel names do not say whether they ran on "
                "Tensor Cores, so their % of roof is a floor."
            )
        else:
            lines.append(
                f"?: no compute ceiling for {calls_text}: the kernel names do not say whether they ran on Tensor "
                "Cores (TF32 / FP64) or CUDA cores, so no time lost is counted for them (--peak-tflops sets one)."
            )
    return lines


def _why_empty(t: Trace, ops: pl.DataFrame) -> str:
    """Why no op has a roofline, in the report's words."""
    kind = trace_kind(t)
    if t.ops.height == 0:
        return empty_reasons.no_ops(kind, nsys=t.format.startswith("nsys"))
    if ops.filter(pl.col("flops") > 0).height == 0:
        return empty_reasons.no_flops(kind)
    return "no op with a FLOP or byte count launched GPU work"


def _write_chart(path: str, ops: pl.DataFrame, spec: GpuSpec, title: str) -> None:
    suffix = Path(path).suffix.lower()
    if suffix not in (".html", ".svg", ".png"):
        raise TraceError(path, "the chart must be .html, .svg or .png")
    if suffix != ".html":
        try:
            import kaleido  # noqa: F401
        except ModuleNotFoundError:
            raise TraceError(path, f"{suffix} charts need the kaleido package (pip install kaleido); .html works without it") from None
    from kinetolens.views.figures import roofline_figure  # plotly: only for charts

    fig = roofline_figure(ops, spec, title)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".html":
            fig.write_html(path, include_plotlyjs=True, full_html=True)
        else:
            fig.write_image(path)
    except OSError as exc:
        raise TraceError(path, f"cannot write chart ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001 - kaleido's browser errors have no common base
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TraceError(path, f"cannot render {suffix} with kaleido ({reason}); .html works without it") from None


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
@trace_load_options(capture=True)
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
        raise TraceError(trace, f"nothing to put on a roofline: {_why_empty(t, ops)}")
    if output:
        _write_chart(output, ops, spec, f"Roofline: {Path(trace).name} on {spec.name}")
    if json_ or csv_:
        emit(table, "json" if json_ else "csv")
        return
    dropped = _print_table(table.head(top), f"kinetolens roofline: {trace} (by {by})", width)
    total, lost = float(table["device_us"].sum()), float(table["lost_us"].sum())
    lost75 = float(table["lost_75_us"].sum())
    note = f"; chart: {output}" if output else ""
    console = render_console(width)
    lines = [
        f"{spec.name} ({spec.origin}): DRAM {spec.dram_gbps:,.0f}\u00a0GB/s. Ops with a roofline: {_time(total)} on "
        f"the GPU, {_time(lost)} lost to the roof, {_time(lost75)} below {REALISTIC:.0%} of it{note}",
        *_caveat_lines(ops),
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
