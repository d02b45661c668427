"""The terminal table, notes and chart of ``kinetolens roofline`` (the
command itself is :mod:`kinetolens.cli.roofline_command`)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from rich.table import Table
from rich.text import Text

from kinetolens.analysis.hardware.roofline import REALISTIC, ceiling_caveats
from kinetolens.analysis.trace_kind import trace_kind
from kinetolens.cli.render import console as render_console
from kinetolens.cli.render import print_heading
from kinetolens.errors import TraceError
from kinetolens.model.trace import Trace
from kinetolens.registry.gpus import GpuSpec
from kinetolens.views import empty_reasons, units


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
MEASURED_COLUMNS = [("bytes_ratio", "bytes ratio", units.sig)]
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


def sentence_time(us: float) -> str:
    """A time in a sentence: its number and unit kept on one line."""
    return units.duration(us).replace(" ", "\u00a0")


def _time_unit(table: pl.DataFrame) -> tuple[str, float]:
    """The one time unit of the table: that of its biggest device time."""
    return units.time_unit(float(table["device_us"].max() or 0.0) if table.height else 0.0)


def print_roofline_table(table: pl.DataFrame, title: str, width: int | None) -> list[str]:
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
    dropped: list[str] = []
    # The narrow drops while the key is short of ``want``; then, from the right,
    # what the key's floor still leaves no room for: the table never runs past the width.
    rest = [c for c, _, _ in reversed(cols) if c not in NARROW_DROPS]
    for candidates, need in ((NARROW_DROPS, want), (rest, floor)):
        for c in candidates:
            if console.width - 1 - sum(sizes[c2] + 3 for c2, _, _ in cols) - 3 >= need:
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


def caveat_lines(ops: pl.DataFrame) -> list[str]:
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


def why_empty(t: Trace, ops: pl.DataFrame) -> str:
    """Why no op has a roofline, in the report's words."""
    kind = trace_kind(t)
    if t.ops.height == 0:
        return empty_reasons.no_ops(kind, nsys=t.format.startswith("nsys"))
    if ops.filter(pl.col("flops") > 0).height == 0:
        return empty_reasons.no_flops(kind)
    return "no op with a FLOP or byte count launched GPU work"


def write_chart(path: str, ops: pl.DataFrame, spec: GpuSpec, title: str) -> None:
    suffix = Path(path).suffix.lower()
    if suffix not in (".html", ".svg", ".png"):
        raise TraceError(path, "the chart must be .html, .svg or .png")
    if suffix != ".html":
        try:
            import kaleido  # noqa: F401
        except ModuleNotFoundError:
            raise TraceError(path, f"{suffix} charts need the kaleido package (pip install kaleido); .html works without it") from None
    from kinetolens.views.chart_output import styled  # plotly: only for charts
    from kinetolens.views.figures import roofline_figure

    fig = styled(roofline_figure(ops, spec, title))
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
