"""Plotly figures of the analyses, shared by the report, the dashboard and notebooks.

Every builder takes the table an analysis returns (never a file, never a
:class:`~kinetolens.model.Trace`) and returns the chart as a plotly figure
dictionary (:mod:`kinetolens.views.plot_spec`, which says why not a
``plotly.graph_objects.Figure``), so one chart is the same in ``kinetolens
report``, the web dashboard and Jupyter; the report and the dashboard give it
their look as they write it (:mod:`kinetolens.views.chart_output`), and in a
notebook ``chart_output.styled(fig)`` makes it a Figure with that look.
Builders accept empty tables and then return a figure that says there is
nothing to draw, so a caller never has to special-case a CPU-only trace.
Only SVG trace types are used (no ``scattergl``): the report must render in
browsers without WebGL.

Signatures (stable; later arguments are keyword options):

* ``step_breakdown_figure(breakdown)``: ``analysis.overview.step_breakdown``
  (ns per category per step) as stacked bars in milliseconds.
* ``top_ops_figure(ops, value=..., top=15, kind="bar"|"pie")``:
  ``analysis.ops.op_stats`` (any grouping; the first column is the label).
* ``tensor_core_figure(kernels)``: ``analysis.kernels.kernel_table`` (or any
  table with ``tc`` and ``dur_us``): GPU time by Tensor Core verdict.
* ``module_icicle_figure(modules, value=...)``: ``op_stats(by="module")``;
  dotted module paths become the hierarchy, each node sized by its own time
  plus its children's.
* ``roofline_figure(ops, spec, title)``: ``analysis.roofline.op_roofline``.
* ``memory_figure(curve)``: ``analysis.memory.memory_curve``, allocated
  (solid) and reserved (dotted) bytes per device over time.
* ``temporal_figure(temporal)``: ``analysis.idle.temporal_breakdown``, one
  bar per rank (at most :data:`MAX_RANK_BARS`: beyond, the ranks with the
  most and the least idle time).
* ``rank_step_figure(ranks)``: ``analysis.distributed.step_times``, each
  rank's mean step as compute, exposed communication and other time.
* ``idle_figure(idle)``: ``analysis.idle.idle_breakdown``, idle time per
  stream split by cause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from kinetolens.analysis.hardware.kernels import tensor_core_time
from kinetolens.analysis.gputime.overview import CATEGORIES, OTHER
from kinetolens.analysis.hardware.roofline import peak_tflops, roofline_points
from kinetolens.model.vocabulary import CATEGORY_WORDS
from kinetolens.views import units
from kinetolens.views.plot_spec import Figure, figure
from kinetolens.views.plot_spec import title as title_of

if TYPE_CHECKING:
    from kinetolens.registry.gpus import GpuSpec

#: One colour per step-breakdown category, stable across charts.
CATEGORY_COLORS = {
    "kernel": "#4c78a8",
    "memcpy": "#f58518",
    "memset": "#e45756",
    "communication": "#72b7b2",
    "runtime": "#54a24b",
    "dataloader": "#eeca3b",
    "cpu_exec": "#b279a2",
    OTHER: "#bab0ac",
}
TC_COLORS = {"yes": "#54a24b", "no": "#e45756", "unknown": "#bab0ac"}
#: Height of one rank's bar in per-rank charts, and the most ranks drawn one
#: bar each: 128 ranks at 40 px made a 5,000 px chart, 2 ranks a strip.
RANK_BAR_PX = 28
MAX_RANK_BARS = 32
#: Labels longer than this are cut in the middle (:func:`kinetolens.views.units.middle`).
LABEL_CHARS = 60


def _short(label: object, chars: int = LABEL_CHARS) -> str:
    text = "(none)" if label is None else str(label)
    return units.middle(text, chars)


def empty_figure(title: str, message: str) -> Figure:
    """A figure with no data that says why, so every chart slot still renders."""
    note = {"text": message, "showarrow": False, "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper", "font": {"size": 14}}
    return figure(annotations=[note], title=title_of(title), xaxis={"visible": False}, yaxis={"visible": False})


def step_breakdown_figure(
    breakdown: pl.DataFrame, title: str = "Step time breakdown", labels: list[str] | None = None
) -> Figure:
    """Stacked bars: each step's wall time split into the overview's categories (ms);
    ``labels`` names the bars (an inference trace's iterations) instead of ``step N``."""
    if breakdown.height == 0:
        return empty_figure(title, "no steps")
    labels = labels or [("trace" if s is None else f"step {s}") for s in breakdown["step"].to_list()]
    bars = []
    for cat in (*CATEGORIES, OTHER):
        ms = (breakdown[cat].cast(pl.Float64) / 1e6).to_list()
        if not any(ms):
            continue
        words = CATEGORY_WORDS[cat]  # the legend reads "CPU execution", never the column's id
        bars.append({"type": "bar", "x": labels, "y": ms, "name": words, "marker": {"color": CATEGORY_COLORS[cat]},
                     "hovertemplate": "%{x}<br>" + words + ": %{y:,.3f} ms<extra></extra>"})  # fmt: skip
    return figure(bars, barmode="stack", title=title_of(title), yaxis={"title": title_of("ms")}, xaxis={"type": "category"})


def top_ops_figure(
    ops: pl.DataFrame,
    value: str = "device_total_us",
    top: int = 15,
    kind: str = "bar",
    title: str | None = None,
) -> Figure:
    """The ``top`` rows of an ``op_stats`` table by ``value``; the rest summed as "other" in a pie."""
    words = units.basis_words(value)
    title = title or f"Top {top} by {words}"
    if ops.height == 0 or value not in ops.columns or not (ops[value].fill_null(0) > 0).any():
        return empty_figure(title, f"no {words}")
    key = ops.columns[0]
    ranked = ops.filter(pl.col(value) > 0).sort(value, descending=True)
    head = ranked.head(top)
    labels = [_short(v) for v in head[key].to_list()]
    values = head[value].to_list()
    if kind == "pie":
        rest = float(ranked[value].sum() - head[value].sum())
        if rest > 0:
            labels, values = [*labels, "other"], [*values, rest]
        pie = {"type": "pie", "labels": labels, "values": values, "sort": False, "textinfo": "percent", "textposition": "inside",
               "hovertemplate": "%{label}<br>%{value:,.1f} us (%{percent})<extra></extra>"}  # fmt: skip
        # The legend under the pie, one whole name a line: beside it, long kernel names clipped it to a scroll box.
        return figure(
            [pie], title=title_of(title),
            legend={"orientation": "v", "x": 0, "xanchor": "left", "y": -0.05, "yanchor": "top"},
            height=360 + 22 * len(labels), margin={"l": 20, "r": 20, "b": 20},
        )  # fmt: skip
    if kind == "bar":
        bar = {"type": "bar", "x": values[::-1], "y": labels[::-1], "orientation": "h",
               "hovertemplate": "%{y}<br>%{x:,.1f} us<extra></extra>"}  # fmt: skip
        return figure(
            [bar], title=title_of(title), xaxis={"title": title_of(f"{words} (us)")}, yaxis={"automargin": True},
            height=max(300, 28 * len(labels) + 120), margin={"l": 20},
        )  # fmt: skip
    raise ValueError(f"unknown kind {kind!r}; choose bar or pie")


def tensor_core_figure(kernels: pl.DataFrame, title: str = "GPU time by Tensor Core use") -> Figure:
    """Pie of kernel time (``dur_us``) by ``tc`` verdict: yes / no / unknown."""
    if kernels.height == 0:
        return empty_figure(title, "no GPU kernels")
    by = tensor_core_time(kernels)
    if by.height == 0:
        return empty_figure(title, "no GPU time")
    tcs = by["tc"].to_list()
    pie = {"type": "pie", "labels": tcs, "values": by["us"].to_list(), "sort": False,
           "marker": {"colors": [TC_COLORS.get(t, "#888") for t in tcs]},
           "hovertemplate": "Tensor Cores %{label}<br>%{value:,.1f} us (%{percent})<extra></extra>"}  # fmt: skip
    return figure([pie], title=title_of(title))


def module_tree(modules: pl.DataFrame, value: str = "device_total_us") -> pl.DataFrame:
    """``id, parent, label, own, total`` for every module path and its ancestors.

    ``own`` is the group's own time from ``op_stats(by="module")``; ``total``
    adds every descendant's, so a parent is never smaller than its children.
    Ops outside any module are the ``(no module)`` root.
    """
    own: dict[str, float] = {}
    for path, v in modules.select(pl.col("module").fill_null("(no module)"), pl.col(value).fill_null(0.0)).iter_rows():
        own[path] = own.get(path, 0.0) + float(v)
    total: dict[str, float] = {}
    for path, v in own.items():
        parts = path.split(".")
        for i in range(1, len(parts) + 1):
            node = ".".join(parts[:i])
            total[node] = total.get(node, 0.0) + v
    rows = [
        {"id": node, "parent": node.rsplit(".", 1)[0] if "." in node else "",
         "label": node.rsplit(".", 1)[-1], "own": own.get(node, 0.0), "total": t}
        for node, t in total.items()
    ]  # fmt: skip
    schema = {"id": pl.String, "parent": pl.String, "label": pl.String, "own": pl.Float64, "total": pl.Float64}
    return pl.DataFrame(rows, schema=schema).sort("id")


#: Most boxes one icicle level shows at once and stays readable (in its 500 px).
ICICLE_MAX_BOXES = 40


def _readable_depth(ids: pl.Series) -> int:
    """Levels drawn at once: down to the deepest whose boxes stay readable
    (24 decoder layers: yes; their 96 blocks: no, a click on a layer opens them)."""
    per_level = ids.str.count_matches(".", literal=True).value_counts().sort(ids.name)
    readable = per_level.filter(pl.col("count") <= ICICLE_MAX_BOXES)[ids.name].to_list()
    depth = 0
    while depth + 1 in readable:
        depth += 1
    return max(2, depth + 1)


def module_icicle_figure(
    modules: pl.DataFrame, value: str = "device_total_us", title: str = "Time by module"
) -> Figure:
    """Icicle of the module hierarchy, each box its subtree's time."""
    tree = module_tree(modules, value).filter(pl.col("total") > 0) if modules.height else pl.DataFrame()
    if tree.height == 0:
        return empty_figure(title, f"no {value} in modules")
    icicle = {"type": "icicle", "ids": tree["id"].to_list(), "parents": tree["parent"].to_list(),
              "labels": tree["label"].to_list(), "values": tree["total"].to_list(),
              "branchvalues": "total", "customdata": tree["own"].to_list(),
              "hovertemplate": "%{id}<br>%{value:,.1f} us (own %{customdata:,.1f} us)<extra></extra>",
              "maxdepth": _readable_depth(tree["id"])}  # fmt: skip
    return figure([icicle], title=title_of(title), margin={"t": 50, "l": 10, "r": 10, "b": 10}, height=500)


def roofline_figure(ops: pl.DataFrame, spec: GpuSpec, title: str) -> Figure:
    """Log-log roofline: the memory slope, one flat roof per compute ceiling used, one point per op and shapes."""
    pts = roofline_points(ops)
    bw = float(spec.dram_gbps or 0.0)
    precisions = sorted(p for p in pts["ceiling"].drop_nulls().unique().to_list() if peak_tflops(spec, p))
    lo = min([0.01, *pts["intensity"].to_list()]) / 2
    hi = max([1e4, *pts["intensity"].to_list()]) * 2
    top = max([peak_tflops(spec, p) or 0.0 for p in precisions] or [1.0])
    ridge_top = top * 1e3 / bw
    lines = [{"type": "scatter", "x": [lo, ridge_top], "y": [lo * bw / 1e3, top], "mode": "lines",
              "name": f"DRAM {bw:,.0f} GB/s", "line": {"color": "black"}}]  # fmt: skip
    for p in precisions:
        peak = peak_tflops(spec, p) or 0.0
        lines.append({"type": "scatter", "x": [peak * 1e3 / bw, hi], "y": [peak, peak], "mode": "lines",
                      "name": f"{p} peak {peak:,.1f} TFLOP/s", "line": {"dash": "dash"}})  # fmt: skip
    biggest = max(pts["device_us"].max() or 1.0, 1e-9)  # type: ignore[operator]
    for p in sorted(set(pts["ceiling"].drop_nulls().to_list())):
        sub = pts.filter(pl.col("ceiling") == p)
        hover = [
            f"{r['name']}<br>shapes: {r['shapes']}<br>{r['calls']} calls, {r['device_us']:,.1f} us<br>"
            f"intensity {r['intensity']:,.2f} FLOP/B<br>achieved {r['achieved_tflops']:,.3f} TFLOP/s<br>"
            + (f"{r['pct_of_roof']:,.1f}% of roof" if r["pct_of_roof"] is not None else "roof unknown")
            + f" ({r['bound']}-bound)"
            for r in sub.iter_rows(named=True)
        ]
        sizes = [6 + 40 * (v / biggest) ** 0.5 for v in sub["device_us"].to_list()]
        lines.append({"type": "scatter", "x": sub["intensity"].to_list(), "y": sub["achieved_tflops"].to_list(),
                      "mode": "markers", "name": f"ops ({p})", "text": hover, "hoverinfo": "text",
                      "marker": {"size": sizes, "opacity": 0.7, "line": {"width": 0.5}}})  # fmt: skip
    return figure(
        lines,
        title=title_of(title),
        xaxis={"type": "log", "title": title_of("arithmetic intensity (FLOP/byte)")},
        yaxis={"type": "log", "title": title_of("TFLOP/s")},
    )


#: Time buckets a memory curve keeps points for: a chart is about 1,000 px wide, and a
#: curve of a million allocations drawn point by point made a page of tens of megabytes.
CURVE_BUCKETS = 2000


def drawn_points(part: pl.DataFrame, buckets: int = CURVE_BUCKETS) -> pl.DataFrame:
    """The rows of one device's curve (sorted by ``ts``) worth drawing: per time bucket,
    its first and last point and those where allocated and reserved are lowest and
    highest, so every peak and trough is drawn at its height.  A curve of at most
    four points a bucket is drawn whole."""
    if part.height <= 4 * buckets:
        return part
    t0, t1 = int(part["ts"][0]), int(part["ts"][-1])
    bucket = ((pl.col("ts") - t0) * buckets // max(t1 - t0, 1)).alias("bucket")
    rows = part.with_row_index("row").with_columns(bucket)
    picks = [pl.col("row").first(), pl.col("row").last(),
             pl.col("row").get(pl.col("allocated").arg_max()), pl.col("row").get(pl.col("allocated").arg_min())]  # fmt: skip
    if part["reserved"].drop_nulls().len():
        picks += [pl.col("row").get(pl.col("reserved").arg_max()), pl.col("row").get(pl.col("reserved").arg_min())]
    keep = rows.group_by("bucket").agg(pl.concat_list(picks).alias("keep")).select(pl.col("keep").explode())
    return rows.filter(pl.col("row").is_in(keep["keep"].implode())).drop("row", "bucket")


def memory_figure(curve: pl.DataFrame, title: str = "Device memory over time") -> Figure:
    """Allocated (solid) and reserved (dotted) bytes per device, ms from the first event,
    in the binary unit that fits the peak (GiB, MiB or KiB: never "600µ GiB")."""
    if curve.height == 0:
        return empty_figure(title, "no memory records (profile with profile_memory=True)")
    t0 = int(curve["ts"].min())  # type: ignore[arg-type]
    top = max(float(curve[c].max() or 0) for c in ("allocated", "reserved") if c in curve.columns)  # type: ignore[arg-type]
    unit, scale = next(((u, s) for u, s in (("GiB", 2**30), ("MiB", 2**20)) if top >= s), ("KiB", 2**10))
    lines = []
    for (device,), whole in curve.sort("ts").group_by("device", maintain_order=True):
        part = drawn_points(whole)
        x = ((part["ts"] - t0) / 1e6).to_list()
        hover = [f"{op or '-'}" for op in part["op"].to_list()]
        lines.append({"type": "scatter", "x": x, "y": (part["allocated"] / scale).to_list(), "mode": "lines",
                      "line": {"shape": "hv"}, "name": f"{device} allocated", "text": hover,
                      "hovertemplate": "%{x:,.3f} ms<br>%{y:,.3f} " + unit + "<br>%{text}<extra></extra>"})  # fmt: skip
        if part["reserved"].drop_nulls().len():
            lines.append({"type": "scatter", "x": x, "y": (part["reserved"] / scale).to_list(), "mode": "lines",
                          "line": {"shape": "hv", "dash": "dot"}, "name": f"{device} reserved"})  # fmt: skip
    return figure(lines, title=title_of(title), xaxis={"title": title_of("ms")}, yaxis={"title": title_of(unit)})


def rank_bars(frame: pl.DataFrame, key: str, what: str) -> tuple[pl.DataFrame, str]:
    """The rows of a per-rank chart and a note on which: every rank up to
    :data:`MAX_RANK_BARS`, else the half with the highest ``key`` and the
    half with the lowest (the outliers a reader looks for), in rank order."""
    if frame.height <= MAX_RANK_BARS:
        return frame.sort("rank"), ""
    half = MAX_RANK_BARS // 2
    ordered = frame.sort([key, "rank"], descending=[True, False])
    shown = pl.concat([ordered.head(half), ordered.tail(half)]).sort("rank")
    return shown, f" ({MAX_RANK_BARS} of {frame.height} ranks: the {half} with the most {what} and the {half} with the least)"


def rank_chart_height(bars: int) -> int:
    """A per-rank chart's height: :data:`RANK_BAR_PX` per bar over title, legend and axis."""
    return 170 + RANK_BAR_PX * max(bars, 4)


def temporal_figure(temporal: pl.DataFrame, title: str = "GPU time: compute, non-compute, idle") -> Figure:
    """Stacked horizontal bars per rank of the temporal breakdown (percent of the kernel span)."""
    if temporal.height == 0:
        return empty_figure(title, "no GPU work")
    temporal, note = rank_bars(temporal, "idle_pct", "idle time")
    ranks = [f"rank {r}" for r in temporal["rank"].to_list()]
    bars = [
        {"type": "bar", "y": ranks, "x": temporal[f"{col}_pct"].to_list(), "orientation": "h", "name": col,
         "marker": {"color": color}, "customdata": temporal[f"{col}_us"].to_list(),
         "hovertemplate": "%{y} " + col + ": %{x:.2f}% (%{customdata:,.1f} us)<extra></extra>"}
        for col, color in (("compute", "#4c78a8"), ("non_compute", "#f58518"), ("idle", "#bab0ac"))
    ]  # fmt: skip
    return figure(bars, barmode="stack", title=title_of(title + note), xaxis={"title": title_of("% of GPU span")},
                  yaxis={"type": "category", "autorange": "reversed"}, height=rank_chart_height(len(ranks)),
                  legend={"orientation": "h", "y": -0.25 if len(ranks) < 8 else -0.1, "traceorder": "normal"})  # fmt: skip


def rank_step_figure(ranks: pl.DataFrame, title: str = "Mean step per rank: compute, exposed communication, other") -> Figure:
    """Stacked horizontal bars per rank of ``step_times`` (ms per step): the
    three parts add up to the rank's mean step."""
    if ranks.height == 0 or "exposed_comm_ms" not in ranks.columns:
        return empty_figure(title, "no steps")
    # a straggler waits least at collectives, the ranks it holds up most: both ends are the outliers
    ranks, note = rank_bars(ranks, "exposed_comm_ms", "exposed communication")
    labels = [f"rank {r}" for r in ranks["rank"].to_list()]
    bars = [
        {"type": "bar", "y": labels, "x": ranks[col].to_list(), "orientation": "h", "name": name, "marker": {"color": color},
         "hovertemplate": "%{y} " + name + ": %{x:,.3f} ms<extra></extra>"}
        for col, name, color in (("compute_ms", "compute", "#4c78a8"), ("exposed_comm_ms", "exposed communication", "#72b7b2"),
                                 ("other_ms", "other", "#bab0ac"))
    ]  # fmt: skip
    return figure(bars, barmode="stack", title=title_of(title + note), xaxis={"title": title_of("ms per step")},
                  yaxis={"type": "category", "autorange": "reversed"}, height=rank_chart_height(len(labels)),
                  legend={"orientation": "h", "y": -0.25 if len(labels) < 8 else -0.1, "traceorder": "normal"})  # fmt: skip


def idle_figure(idle: pl.DataFrame, title: str = "GPU idle time by cause") -> Figure:
    """Stacked bars per stream: idle microseconds waiting on the host, between kernels, other."""
    if idle.height == 0 or not (idle["idle_us"] > 0).any():
        return empty_figure(title, "no GPU idle time")
    labels = [f"rank {r} stream {s}" for r, s in idle.select("rank", "stream").unique(maintain_order=True).iter_rows()]
    bars = [
        {"type": "bar", "x": [f"rank {r} stream {s}" for r, s in part.select("rank", "stream").iter_rows()],
         "y": part["idle_us"].to_list(), "name": str(cat),
         "hovertemplate": "%{x}<br>" + str(cat) + ": %{y:,.1f} us<extra></extra>"}
        for (cat,), part in idle.group_by("idle_category", maintain_order=True)
    ]  # fmt: skip
    return figure(bars, barmode="stack", title=title_of(title), yaxis={"title": title_of("us")},
                  xaxis={"type": "category", "categoryorder": "array", "categoryarray": labels})  # fmt: skip
