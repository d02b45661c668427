"""``kinetolens report -o report.html``: one self-contained HTML file.

plotly.js is read from the installed plotly package and embedded once in
the page, and every chart is a plotly figure drawn from the page's own
data, so the file opens offline, can be mailed or attached to a CI job and
never fetches anything.  Tables are plain HTML (escaped by jinja2), cut to
the top rows; the full tables are what ``kinetolens export`` writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from kinetolens import __version__
from kinetolens.analysis.hardware.module_tree import NO_MODULE, by_type
from kinetolens.analysis.workload.ops import time_basis
from kinetolens.errors import TraceError
from kinetolens.views import units
from kinetolens.views.chart_output import chart_html
from kinetolens.views.module_tree_html import module_tree_html
from kinetolens.views.report_frames import (
    MIN_CHART_PX,
    SOURCES_NOTE,
    breakdown_frame,
    cross_rank_frames,
    frame_html,
    memory_frame,
    overview_frame,
)
from kinetolens.views.inference_words import iterations_sentence
from kinetolens.views.report_phases import iteration_frame, labels_frame, phase_frame

if TYPE_CHECKING:
    from kinetolens.views.report_data import ReportData

TEMPLATE = "report.html.j2"


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("kinetolens.views", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=False,
    )
    env.filters["saving"] = units.saving_ms
    return env


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
        "ops": frame_html(data.ops, [c for c in dict.fromkeys(op_cols) if data.summary.kind.gpu or not c.startswith("device_")]),
        "kernels": frame_html(data.kernel_names, ["kernel", "calls", "device_total_us", "mean_us", "op", "occupancy", "step_share_pct", "tflops_s", "gbps"]),
        "modules": _modules_html(data),
        "sources": frame_html(data.sources, list(dict.fromkeys(["source", "calls", time_basis(data.trace), "host_total_us", "step_share_pct"]))),
        "memory": frame_html(memory_frame(data), rows=None, cell_chars=None),
    }  # fmt: skip
    if data.cross_rank is not None:
        tables.update(cross_rank_tables(data))
    if data.summary.inference.iterations:
        tables.update(phase_tables_html(data))
    if data.roofline_modules is not None:
        tables["roofline"] = frame_html(
            data.roofline_modules,
            ["module", "calls", "device_us", "ideal_us", "pct_of_roof", "lost_us", "bound", "precision"],
        )
    return tables


def phase_tables_html(data: ReportData) -> dict[str, Markup]:
    """An inference trace's iteration and phase tables, and each phase's top kernels and ops, as HTML."""
    block = data.summary.inference
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
def cross_rank_tables(data: ReportData) -> dict[str, Markup]:
    """The cross-rank tables as HTML, keyed ``cross_<name>``, with their headings."""
    return {
        f"cross_{name}": Markup("<h3>{}</h3>").format(heading) + frame_html(frame, rows=None)
        for name, (heading, frame) in cross_rank_frames(data).items()
    }


def _charts(data: ReportData) -> dict[str, Markup]:
    """Each chart as HTML, or the sentence that stands in for it (:data:`ReportData.chart_notes`)."""
    # At least MIN_CHART_PX tall: a plot area of 40 px (a one-rank idle chart in a grid cell) cannot be read.
    charts = {name: Markup(chart_html(fig, f"kl-chart-{name}", MIN_CHART_PX)) for name, fig in data.figures().items()}
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
        phases_intro=iterations_sentence(data.summary.inference),
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
