"""``kinetolens roofline``: which ops and modules lose the most time to their roofline."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl
from rich.console import Console

from kinetolens.analysis.roofline import (
    GROUPINGS,
    REALISTIC,
    op_roofline,
    require_roofs,
    roofline_by,
)
from kinetolens.cli.checks import WIDTH
from kinetolens.cli.render import emit
from kinetolens.errors import TraceError
from kinetolens.loader import load
from kinetolens.registry.gpus import GpuSpec, gpu_spec
from kinetolens.views.figures import roofline_figure

TERMINAL_COLUMNS = ["calls", "device_us", "ideal_us", "pct_of_roof", "lost_us", "lost_75_us", "intensity",
                    "achieved_tflops", "bound", "precision"]  # fmt: skip
#: Measured DRAM bytes over modeled, shown where the trace has CUPTI counters.
MEASURED_COLUMNS = ["bytes_ratio"]
#: Module paths are long; the terminal shows their tail (the layer).
KEY_CHARS = 70


def _write_chart(path: str, ops: pl.DataFrame, spec: GpuSpec, title: str) -> None:
    suffix = Path(path).suffix.lower()
    if suffix not in (".html", ".svg", ".png"):
        raise TraceError(path, "the chart must be .html, .svg or .png")
    if suffix != ".html":
        try:
            import kaleido  # noqa: F401
        except ModuleNotFoundError:
            raise TraceError(path, f"{suffix} charts need the kaleido package (pip install kaleido); .html works without it") from None
    fig = roofline_figure(ops, spec, title)
    try:
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
@click.option("--no-cache", is_flag=True, help="Neither read nor write the Parquet cache.")
def roofline_command(
    trace: str, output: str | None, by: str, peak_tflops: float | None, peak_gbps: float | None,
    spec_file: str | None, top: int, csv_: bool, json_: bool, width: int | None, no_cache: bool,
) -> None:  # fmt: skip
    """Time each op (or module) loses to its roofline in TRACE.

    Roof: min(peak FLOP/s of the precision it ran in, intensity x DRAM
    bandwidth), with the GPU's dense peaks from the spec table.  lost_us is
    device time minus the time at 100% of the roof; lost_75_us against a
    realistic 75%.  Rows are sorted by lost_us.
    """
    t = load(trace, cache=not no_cache)
    spec = require_roofs(gpu_spec(t, spec_file=spec_file, peak_tflops=peak_tflops, peak_gbps=peak_gbps), t)
    ops = op_roofline(t, spec)
    table = roofline_by(t, spec, by=by)
    if output:
        _write_chart(output, ops, spec, f"Roofline: {Path(trace).name} on {spec.name}")
    if json_ or csv_:
        emit(table, "json" if json_ else "csv")
        return
    key = table.columns[0]
    measured = [c for c in MEASURED_COLUMNS if c in table.columns]  # traces with CUPTI DRAM counters
    shown = table.head(top).select(pl.col(key).str.tail(KEY_CHARS), *TERMINAL_COLUMNS, *measured)
    emit(shown, "table", title=f"kinetolens roofline: {trace} (by {by})", width=width)
    total, lost = float(table["device_us"].sum()), float(table["lost_us"].sum())
    lost75 = float(table["lost_75_us"].sum())
    note = f"; chart: {output}" if output else ""
    Console(width=width).print(
        f"{spec.name} ({spec.origin}): DRAM {spec.dram_gbps:,.0f} GB/s. Ops with a roofline: {total:,.1f} us on the GPU, "
        f"{lost:,.1f} us lost to the roof, {lost75:,.1f} us below {REALISTIC:.0%} of it{note}",
        markup=False,
        highlight=False,
    )
