"""Figures only the dashboard draws: the step timeline and the memory curve with a range slider.

The timeline is built on the server from one step's window of ``trace.ops``
and ``trace.kernels``, capped in event count (the longest events are kept),
so the browser draws a few thousand bars, never a whole trace.  Bars are
horizontal bar segments (``base`` = start) on one lane per thread and
nesting depth, one per CUDA stream and one module band per thread; launch
flows are line segments from the launching runtime call to the kernel.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from kinetolens.views.figures import empty_figure, memory_figure
from kinetolens.views.plot_spec import Figure, figure, update_layout
from kinetolens.views.plot_spec import title as title_of

#: At most this many ops, kernels and flows are drawn per timeline.
MAX_EVENTS = 3000
MAX_FLOWS = 400
MAX_DEPTH = 4


def _capped(frame: pl.DataFrame, cap: int) -> pl.DataFrame:
    return frame if frame.height <= cap else frame.sort("dur", descending=True).head(cap)


def _bars(frame: pl.DataFrame, lane: pl.Expr, t0: int, name: str, color: str) -> dict[str, Any]:
    rows = frame.with_columns(lane.alias("lane"))
    hover = [
        f"{n}<br>{d / 1000:,.1f} us" + (f"<br>{m}" if m else "")
        for n, d, m in rows.select("name", "dur", pl.col("module") if "module" in rows.columns else pl.lit(None))
        .iter_rows()
    ]
    return {
        "type": "bar", "y": rows["lane"].to_list(), "x": (rows["dur"] / 1e6).to_list(),
        "base": ((rows["ts"] - t0) / 1e6).to_list(), "orientation": "h", "name": name,
        "marker": {"color": color, "line": {"width": 0}}, "text": hover, "hoverinfo": "text", "textposition": "none",
    }  # fmt: skip


def _lanes(ops: pl.DataFrame, bands: pl.DataFrame, kernels: pl.DataFrame) -> int:
    return (
        ops.select("tid", "depth").n_unique() if ops.height else 0
    ) + bands["tid"].n_unique() + (kernels.select("device", "stream").n_unique() if kernels.height else 0)


def timeline_figure(ops: pl.DataFrame, kernels: pl.DataFrame, start: int, end: int, title: str) -> Figure:
    """Ops per thread and depth, module bands, kernels per stream and launch flows in ``[start, end)`` (ns)."""
    ops = ops.filter((pl.col("end") > start) & (pl.col("ts") < end) & (pl.col("depth") < MAX_DEPTH))
    kernels = kernels.filter((pl.col("ts") + pl.col("dur") > start) & (pl.col("ts") < end))
    if ops.height == 0 and kernels.height == 0:
        return empty_figure(title, "no events in this step")
    ops_drawn = _capped(ops, MAX_EVENTS)
    kernels_drawn = _capped(kernels, MAX_EVENTS)
    traces = []
    bands = (
        ops.filter((pl.col("op_id") == pl.col("top_op_id")) & pl.col("module").is_not_null())
        .with_columns(name=pl.col("module"))
    )
    if bands.height:
        traces.append(_bars(_capped(bands, MAX_EVENTS), pl.format("thread {} modules", "tid"), start, "modules", "#b279a2"))
    if ops_drawn.height:
        traces.append(_bars(ops_drawn, pl.format("thread {} depth {}", "tid", "depth"), start, "ops", "#4c78a8"))
    if kernels_drawn.height:
        traces.append(_bars(kernels_drawn, pl.format("GPU {} stream {}", "device", "stream"), start, "kernels", "#f58518"))
    flows = kernels_drawn.filter(pl.col("launch_ts").is_not_null() & pl.col("launch_tid").is_not_null()).head(MAX_FLOWS)
    if flows.height:
        xs: list[float | None] = []
        ys: list[str | None] = []
        for lts, ltid, kts, dev, stream in flows.select("launch_ts", "launch_tid", "ts", "device", "stream").iter_rows():
            xs += [(lts - start) / 1e6, (kts - start) / 1e6, None]
            ys += [f"thread {ltid} depth 0", f"GPU {dev} stream {stream}", None]
        traces.append({"type": "scatter", "x": xs, "y": ys, "mode": "lines", "name": "launch flows",
                       "line": {"width": 0.6, "color": "rgba(80,80,80,0.35)"}, "hoverinfo": "skip"})  # fmt: skip
    shown = ops_drawn.height + kernels_drawn.height
    note = "" if shown == ops.height + kernels.height else f" (longest {shown:,} of {ops.height + kernels.height:,} events)"
    return figure(
        traces, title=title_of(title + note), barmode="overlay",
        xaxis={"title": title_of("ms from step start"), "range": [0, (end - start) / 1e6]},
        yaxis={"type": "category", "autorange": "reversed", "automargin": True},
        height=max(360, 28 * _lanes(ops_drawn, bands, kernels_drawn) + 180), dragmode="zoom",
    )  # fmt: skip


def memory_range_figure(curve: pl.DataFrame, title: str) -> Figure:
    """The shared memory curve with a range slider: the range chosen filters the memory tables."""
    fig = memory_figure(curve, title=title)
    if curve.height:
        # tall enough that the curve keeps ~250 px beside its slider
        update_layout(fig, xaxis={"rangeslider": {"visible": True}, "title": title_of("ms from the first memory event")},
                      height=480)  # fmt: skip
    return fig
