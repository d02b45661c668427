"""Every chart kinetolens draws is a figure dictionary plotly accepts as it is.

The builders write plotly figure dictionaries without plotly's figure
objects, so nothing checks them as they are built (kinetolens.views.plot_spec):
here plotly checks each one, built from real traces (a GPU training step
with memory and a critical path, a CPU-only trace, an inference trace, a run
of two ranks) and from empty tables.  A property plotly does not know, a
value of the wrong kind, or a shortcut plotly would expand (a title given as
text, ``marker_color``) fails: ``go.Figure(fig)`` raises, or writes something
other than the dictionary.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
import pytest

import kinetolens
from kinetolens.runs.graphs import run_summaries_and_graphs
from kinetolens.views import figures
from kinetolens.views.critical_path_section import split_figure
from kinetolens.views.cross_rank_path_section import figures as cross_rank_figures
from kinetolens.views.dashboard import compare, extra_figures, pages
from kinetolens.views.report_data import collect
from tests.conftest import trace_path

TRACES = {
    "gpu": "hta/df_index_resolver/df_index_resolver.json.gz",
    "cpu": "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "inference": "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
}
RUN = "hta/trace_filter"


def _charts_of(data: Any) -> dict[str, dict[str, Any]]:
    """The report's charts and the dashboard's own, of one collected report."""
    t = data.trace
    out = dict(data.all_figures())
    if not isinstance(data.critical_path, str):
        out["critical_path"] = split_figure(data.critical_path)
    if data.cross_rank is not None and not isinstance(data.cross_rank.path, str):
        out.update({f"cross_rank_{k}": v for k, v in cross_rank_figures(data.cross_rank.path).items()})
    step = t.steps.sort("ts").head(1)
    if step.height:
        start = int(step["ts"][0])
        out["timeline"] = extra_figures.timeline_figure(t.ops, t.kernels, start, start + int(step["dur"][0]), "Timeline")
    out["memory_range"] = extra_figures.memory_range_figure(data.memory, "Memory")
    out["ops_pie"] = pages._pie_below(figures.top_ops_figure(data.ops, value=data.basis, top=10, kind="pie", title="Top"))
    out["ops_bar"] = figures.top_ops_figure(data.ops, value=data.basis, top=5)
    out["run_temporal"] = compare._temporal_figure([data.temporal])
    return out


@pytest.fixture(scope="module")
def charts() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, path in TRACES.items():
        for chart, fig in _charts_of(collect(kinetolens.load(trace_path(path), cache=False))).items():
            out[f"{name}: {chart}"] = fig
    ranks, graphs = run_summaries_and_graphs(trace_path(RUN), cache=False)
    first = kinetolens.load(ranks[0].path, cache=False)
    for chart, fig in _charts_of(collect(first, ranks=ranks, graphs=graphs)).items():
        out[f"run: {chart}"] = fig
    empty = pl.DataFrame()
    out["empty: steps"] = figures.step_breakdown_figure(empty)
    out["empty: ops"] = figures.top_ops_figure(empty)
    out["empty: tensor cores"] = figures.tensor_core_figure(empty)
    out["empty: modules"] = figures.module_icicle_figure(empty)
    out["empty: memory"] = figures.memory_figure(empty)
    out["empty: temporal"] = figures.temporal_figure(empty)
    out["empty: ranks"] = figures.rank_step_figure(empty)
    out["empty: idle"] = figures.idle_figure(empty)
    return out


def _written(fig: Any) -> dict[str, Any]:
    """A figure as plotly writes it, less the default template a Figure takes on."""
    spec = json.loads(pio.to_json(fig, validate=False, engine="json"))
    spec["layout"].pop("template", None)
    return spec


def test_the_charts_cover_every_builder(charts: dict[str, dict[str, Any]]) -> None:
    kinds = {trace["type"] for fig in charts.values() for trace in fig["data"]}
    assert kinds == {"bar", "pie", "icicle", "scatter"}
    assert {"run: cross_ranks", "run: cross_rank_bounds", "run: cross_rank_ranks", "gpu: roofline",
            "gpu: critical_path", "gpu: timeline", "inference: steps"} <= set(charts)  # fmt: skip
    assert sum(1 for fig in charts.values() if not fig["data"]) >= 8  # the empty ones say why


def test_plotly_takes_every_chart_as_it_is(charts: dict[str, dict[str, Any]]) -> None:
    for name, fig in charts.items():
        assert type(fig) is dict and set(fig) == {"data", "layout"}, name
        checked = go.Figure(fig)  # raises on a property plotly does not know or a value it refuses
        assert _written(checked) == _written(fig), name


def test_a_shortcut_would_be_caught() -> None:
    # what the test above guards against: plotly expands these, the dictionary would not
    for fig in ({"data": [], "layout": {"title": "t"}}, {"data": [{"type": "bar", "marker_color": "red"}], "layout": {}}):
        assert _written(go.Figure(fig)) != _written(fig)
    with pytest.raises(ValueError):
        go.Figure({"data": [{"type": "bar", "colour": "red"}], "layout": {}})


def test_a_report_draws_its_charts_without_plotlys_figure_objects(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "report.html"
    probe = (
        "import sys\n"
        "from kinetolens.cli.main import main\n"
        f"main(['report', {str(trace_path(TRACES['gpu']))!r}, '-o', {str(out)!r}, '--no-cache'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('plotly.graph_objs.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stat().st_size > 0
    assert done.stdout.strip() == "[]", done.stdout[:300]
