"""``kinetolens report -o report.html``: one self-contained HTML file.

plotly.js is read from the installed plotly package and embedded once in
the page, and every chart is a plotly figure drawn from the page's own
data, so the file opens offline, can be mailed or attached to a CI job and
never fetches anything.  Tables are plain HTML (escaped by jinja2), cut to
the top rows; the full tables are what ``kinetolens export`` writes.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from kinetolens import __version__
from kinetolens.analysis.memory import ALLOCATOR, BASIS_NOTES
from kinetolens.analysis.module_tree import NO_MODULE, by_type
from kinetolens.analysis.ops import time_basis
from kinetolens.analysis.overview import CATEGORIES, OTHER
from kinetolens.analysis.stragglers import CAUSES
from kinetolens.errors import TraceError
from kinetolens.views import units
from kinetolens.views.module_tree_html import module_tree_html
from kinetolens.views.report_data import SOURCES_NOTE, TOP_ROWS, ReportData
from kinetolens.views.report_phases import inference_rows, iteration_frame, labels_frame, phase_frame

#: Text cells longer than this are cut in the middle (keeping a module path's root and leaf).
CELL_CHARS = 120
TEMPLATE = "report.html.j2"


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("kinetolens.views", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=False,
    )
    env.filters["saving"] = units.saving_ms
    return env


def cell_texts(
    frame: pl.DataFrame, shown: pl.DataFrame, limit: int | None = CELL_CHARS
) -> tuple[list[str], list[list[str]]]:
    """Headers and cell text of ``shown`` (the first rows of ``frame``), formatted as the
    CLI and dashboard format them (:func:`units.display`): 1.95 GiB, 91.5%, one time unit
    per column (its header names it); text cut in the middle beyond ``limit`` characters."""
    columns, rows = units.display(frame, shown)
    heads = [c["label"] for c in columns]  # words with their unit, never the column's identifier
    if limit is not None:
        rows = [[units.middle(t, limit) if c["kind"] == "text" else t for c, t in zip(columns, r)] for r in rows]
    return heads, rows


def frame_html(
    frame: pl.DataFrame, columns: list[str] | None = None, rows: int | None = TOP_ROWS, cell_chars: int | None = CELL_CHARS
) -> Markup:
    """An escaped HTML table of the first ``rows`` rows of ``frame`` (``None``: all)."""
    cols = [c for c in (columns or frame.columns) if c in frame.columns]
    shown = frame.select(cols) if rows is None else frame.select(cols).head(rows)
    heads, texts = cell_texts(frame.select(cols), shown, cell_chars)
    # a column aligns as its type says (numbers right), its header and its empty cells with it
    kinds = ["num" if shown.schema[c].is_numeric() else "name" for c in cols]
    head = "".join(f'<th class="{k}">{html.escape(h)}</th>' for k, h in zip(kinds, heads))
    body = [
        "<tr>" + "".join(f'<td class="{k}">{html.escape(t)}</td>' for k, t in zip(kinds, row)) + "</tr>" for row in texts
    ]
    more = ""
    if rows is not None and frame.height > rows:
        more = f'<p class="kl-muted">{rows} of {frame.height:,} rows shown.</p>'
    return Markup(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}")


def _pct(v: float | None) -> str | None:
    return None if v is None else units.percent(v)


def overview_frame(data: ReportData) -> pl.DataFrame:
    """``what, value`` rows: the summary's headline numbers as text."""
    s = data.summary
    steps = s["steps"]
    rows: list[tuple[str, str | None]] = [("trace", data.trace.path)]
    phases = inference_rows(s)  # an inference trace: its iterations instead of steps
    if not s["inference"]["iterations"]:
        rows += [
            ("steps profiled", f"{steps['count']} ({', '.join(map(str, steps['ids'][:10]))}{' ...' if steps['count'] > 10 else ''})"),
            ("mean step time", None if steps["mean_us"] is None else f"{steps['mean_us'] / 1000:.3f} ms"),
            ("step cut short", steps.get("incomplete_note")),
        ]
    rows += phases
    rows += [
        ("trace span", f"{s['span_us'] / 1000:.3f} ms"),
        ("rank / world size", f"{s['rank']} / {s['world_size']}" if s["rank"] is not None else None),
        ("ops ranked by", units.basis_words(data.basis)),
    ]
    for d in s["devices"]:
        rows.append((f"GPU {d['id']}", f"{d['name']} (cc {d['compute_capability']}, {d['sms']} SMs)"))
    for g in s["gpu"]:
        dev = g.get("device")
        rows.append((f"GPU {dev} utilization", _pct(g.get("utilization"))))
        rows.append((f"GPU {dev} SM efficiency", _pct(g.get("sm_efficiency"))))
        rows.append((f"GPU {dev} Tensor Core share of kernel time", _pct(g.get("tensor_core_share"))))
        peak = g.get("peak_allocated_bytes")
        counts = "" if g.get("peak_basis") in (None, ALLOCATOR) else f" ({BASIS_NOTES[g['peak_basis']]})"
        start = g.get("live_at_start_bytes")
        counts += "" if start is None else f" ({units.memory(start)} alive when profiling started)"
        rows.append((f"GPU {dev} peak allocated", None if peak is None else f"{units.memory(peak)}{counts}"))
    a = s["attribution"]
    if a.get("kernel_time_us"):
        rows.append(("kernel time attributed to an op / module / source line",
                     " / ".join(_pct(a.get(k)) or "-" for k in ("op", "module", "source"))))  # fmt: skip
    rows.append(("kernels whose launch was not recorded", s["unrecorded_launches"]["note"]))
    rows.extend(("warning", str(w)) for w in data.trace.warnings)
    return pl.DataFrame(
        [r for r in rows if r[1] is not None], schema={"what": pl.String, "value": pl.String}, orient="row"
    )


def breakdown_frame(data: ReportData) -> pl.DataFrame:
    """Mean time and share of step time per category (the overview's rules)."""
    avg = data.summary["steps"]["average_us"] or {}
    total = avg.get("total") or 0.0
    cats = [c for c in (*CATEGORIES, OTHER) if avg.get(c)]
    return pl.DataFrame(
        {
            "category": cats,
            "mean_per_step_us": [avg[c] for c in cats],
            "pct_of_step": [100.0 * avg[c] / total if total else None for c in cats],
        },
        schema={"category": pl.String, "mean_per_step_us": pl.Float64, "pct_of_step": pl.Float64},
    )


def memory_frame(data: ReportData) -> pl.DataFrame:
    """Peak per device with what it counts (the memory view's numbers, :func:`memory.peak_memory`)."""
    return data.memory_peaks.select(
        "device",
        peak_allocated_bytes="peak_allocated",
        alive_at_start_bytes="live_at_start",
        peak_op="peak_op",
        counts=pl.col("basis").replace_strict(BASIS_NOTES, default=None, return_dtype=pl.String),
    )


def _modules_html(data: ReportData) -> Markup:
    """The module tree, collapsible, and its roll-up by module class (the ``kinetolens modules`` tables)."""
    tree = data.module_tree
    if tree.height == 0 or tree.filter(pl.col("path") != NO_MODULE).height == 0:
        return Markup("<p>No nn.Module hierarchy in this trace (profile with with_stack=True or with_modules=True).</p>")
    types = frame_html(by_type(tree), ["type", "count", "total_us", "mean_us", "min_us", "max_us", "step_share_pct", "tflops_s", "pct_of_roof"])
    return Markup(f"{module_tree_html(tree)}<h3>By module class</h3>{types}")


def _tables(data: ReportData) -> dict[str, Markup]:
    basis = data.basis
    op_cols = ["name", "calls", basis, "device_total_us", "device_self_us", "host_total_us", "step_share_pct", "tflops_s", "gbps", "in_shapes", "dtypes"]
    tables = {
        "overview": frame_html(overview_frame(data), rows=None, cell_chars=None),
        "breakdown": frame_html(breakdown_frame(data), rows=None),
        # A CPU-only trace's device columns are all zero: left out.
        "ops": frame_html(data.ops, [c for c in dict.fromkeys(op_cols) if data.summary["kind"]["gpu"] or not c.startswith("device_")]),
        "kernels": frame_html(data.kernel_names, ["kernel", "calls", "device_total_us", "mean_us", "op", "occupancy", "step_share_pct", "tflops_s", "gbps"]),
        "modules": _modules_html(data),
        "sources": frame_html(data.sources, list(dict.fromkeys(["source", "calls", time_basis(data.trace), "host_total_us", "step_share_pct"]))),
        "memory": frame_html(memory_frame(data), rows=None, cell_chars=None),
    }  # fmt: skip
    if data.cross_rank is not None:
        tables.update(cross_rank_tables(data))
    if data.summary["inference"]["iterations"]:
        tables.update(phase_tables_html(data))
    if data.roofline_modules is not None:
        tables["roofline"] = frame_html(
            data.roofline_modules,
            ["module", "calls", "device_us", "ideal_us", "pct_of_roof", "lost_us", "bound", "precision"],
        )
    return tables


def phase_tables_html(data: ReportData) -> dict[str, Markup]:
    """An inference trace's iteration and phase tables, and each phase's top kernels and ops, as HTML."""
    block = data.summary["inference"]
    tables = {
        "phase_iterations": frame_html(iteration_frame(block)),
        "phase_labels": frame_html(labels_frame(block), rows=None, cell_chars=None),
        "phases": frame_html(phase_frame(block), rows=None),
    }
    for phase, part in data.phases.items():
        for what, frame in part.items():
            tables[f"phase_{phase}_{what}"] = frame_html(frame, rows=None)
    return tables


#: Cross-rank tables: name -> (heading, columns), in report order (the ``kinetolens dist`` tables).
CROSS_RANK_TABLES = {
    "stragglers": ("Arrival at collectives (late: ms after the earliest rank, per step)",
                   ["rank", "straggler", "late_ms", "last_share_pct", "caused_share_pct", "cost_ms_per_step", "differs_most", "excess_ms"]),
    "ranks": ("Per rank (ms per step)", None),
    "steps": ("Step time across ranks (ms)", None),
    "collectives": ("Collectives (per rank: ms over the trace, bandwidth in GB/s as nccl-tests)", None),
}  # fmt: skip


def cross_rank_frames(data: ReportData) -> dict[str, tuple[str, pl.DataFrame]]:
    """The non-empty cross-rank tables with their headings and columns, the
    cause category named as ``kinetolens dist`` names it (both formats)."""
    assert data.cross_rank is not None
    out = {}
    for name, (heading, cols) in CROSS_RANK_TABLES.items():
        frame = getattr(data.cross_rank, name)
        if frame.height:
            if "differs_most" in frame.columns:
                frame = frame.with_columns(pl.col("differs_most").replace(CAUSES))
            frame = units.shares_as_percent(frame)
            out[name] = (heading, frame.select([c for c in (cols or frame.columns) if c in frame.columns]))
    return out


def cross_rank_tables(data: ReportData) -> dict[str, Markup]:
    """The cross-rank tables as HTML, keyed ``cross_<name>``, with their headings."""
    return {
        f"cross_{name}": Markup("<h3>{}</h3>").format(heading) + frame_html(frame, rows=None)
        for name, (heading, frame) in cross_rank_frames(data).items()
    }


#: Height of a chart that does not size itself, and the least any chart gets:
#: a plot area of 40 px (a one-rank idle chart in a grid cell) cannot be read.
CHART_PX = 420
MIN_CHART_PX = 360


def _readable(fig: Any) -> Any:
    """A copy of ``fig`` at least :data:`MIN_CHART_PX` tall (its own height where that is more)."""
    if fig.layout.height is not None and fig.layout.height < MIN_CHART_PX:
        fig = go.Figure(fig).update_layout(height=MIN_CHART_PX)
    return fig


def _charts(data: ReportData) -> dict[str, Markup]:
    """Each chart as HTML, or the sentence that stands in for it (:data:`ReportData.chart_notes`)."""
    charts = {
        name: Markup(
            pio.to_html(_readable(fig), include_plotlyjs=False, full_html=False, div_id=f"kl-chart-{name}",
                        default_height=f"{CHART_PX}px", config={"displaylogo": False, "responsive": True})
            .replace("<div>", '<div class="kl-chart">', 1)
        )
        for name, fig in data.figures().items()
    }  # fmt: skip
    for name, note in data.chart_notes.items():
        charts[name] = Markup('<p class="kl-muted kl-chart-note">{}</p>').format(note)
    return charts


def plotly_js() -> str:
    """The installed plotly package's plotly.min.js, for embedding (never a CDN)."""
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def render_html(data: ReportData, standalone: bool = True) -> str:
    """The report page; ``standalone=False`` gives a fragment for notebooks (plotly.js still embedded once)."""
    from kinetolens.views.critical_path_report import critical_path_html
    from kinetolens.views.cross_rank_path_report import cross_rank_path_html

    env = _environment()
    js = plotly_js()
    page = env.get_template(TEMPLATE).render(
        data=data,
        version=__version__,
        standalone=standalone,
        plotly_js=Markup(js),
        tables=_tables(data),
        charts=_charts(data),
        sources_note=SOURCES_NOTE,
        critical_path=critical_path_html(data),
        cross_rank_path=cross_rank_path_html(data),
    )
    if not standalone:
        page = f"<script>{js}</script>\n{page}"
    return page


def write_html(data: ReportData, path: str | Path) -> None:
    """Write the self-contained report; a :class:`TraceError` names ``path`` if it cannot be written."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(render_html(data), encoding="utf-8")
    except OSError as exc:
        raise TraceError(path, f"cannot write report ({exc.strerror or exc})") from None
