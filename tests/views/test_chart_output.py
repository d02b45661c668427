"""Every chart kinetolens writes has the report's look, put in as it is written.

The figures are plotly figure dictionaries without a template; the report's
HTML, the dashboard's JSON and the roofline's chart file each carry plotly's
``plotly_white`` as plotly itself builds it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
import pytest

import kinetolens
from kinetolens.views.chart_output import TEMPLATE, figure_json, figure_spec, styled
from kinetolens.views.plot_spec import figure, title
from kinetolens.views.report_data import collect
from kinetolens.views.report_frames import MIN_CHART_PX
from kinetolens.views.report_html import write_html
from tests.conftest import trace_path

H100 = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def _plotly_white() -> dict:
    # as plotly writes a figure whose template was set the usual way
    return json.loads(pio.to_json(go.Figure(layout={"template": TEMPLATE})))["layout"]["template"]


def _charts(html: str) -> dict[str, dict]:
    """Each ``Plotly.newPlot(id, data, layout, config)`` of the page: id -> layout."""
    decoder = json.JSONDecoder()
    out = {}
    for match in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', html):
        data, end = decoder.raw_decode(html, match.end())
        rest = html[end:].lstrip()
        assert rest.startswith(",")
        layout, _ = decoder.raw_decode(rest[1:].lstrip())
        out[match.group(1)] = layout
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, str]:
    data = collect(kinetolens.load(trace_path(H100), cache=False))
    page = tmp_path_factory.mktemp("report") / "report.html"
    write_html(data, page)
    return data, Path(page).read_text()


def test_every_chart_of_the_report_is_written_with_plotly_white(report: tuple[object, str]) -> None:
    data, html = report
    charts = _charts(html)
    assert len(charts) >= len(data.figures()) >= 5
    white = _plotly_white()
    for name, layout in charts.items():
        assert layout["template"] == white, name
    # each chart in the page's own box (plotly's wrapper differs between its versions)
    assert html.count('<div class="kl-chart">') == len(charts)


def test_the_figures_are_dictionaries_built_without_the_template(report: tuple[object, str]) -> None:
    data, _ = report
    for name, fig in data.figures().items():
        assert type(fig) is dict and set(fig) == {"data", "layout"}, name
        assert "template" not in fig["layout"], name


def test_a_chart_too_short_to_read_is_written_at_the_least_height(report: tuple[object, str]) -> None:
    data, html = report
    charts = _charts(html)
    heights = {name: fig["layout"].get("height") for name, fig in data.figures().items()}
    for name, height in heights.items():
        written = charts[f"kl-chart-{name}"].get("height")
        if height is None:
            assert written is None, name
        else:
            assert written == max(height, MIN_CHART_PX), name
    assert figure_spec(figure(height=100), MIN_CHART_PX)["layout"]["height"] == MIN_CHART_PX
    assert figure_spec(figure(height=900), MIN_CHART_PX)["layout"]["height"] == 900
    assert "height" not in figure_spec(figure(), MIN_CHART_PX)["layout"]
    # a plotly Figure of the user's is written the same way
    assert figure_spec(go.Figure().update_layout(height=100), MIN_CHART_PX)["layout"]["height"] == MIN_CHART_PX


def test_the_dashboard_and_a_notebook_get_the_same_look() -> None:
    fig = figure([{"type": "bar", "x": ["a", "b"], "y": [1, 2]}], title=title("t"))
    sent = json.loads(figure_json(fig))
    assert sent["layout"]["template"] == _plotly_white()
    assert sent["data"][0]["y"] == [1, 2] and sent["layout"]["title"]["text"] == "t"
    notebook = styled(fig)
    assert isinstance(notebook, go.Figure)  # checked by plotly, shown as any plotly figure
    shown = json.loads(pio.to_json(notebook))
    assert shown["layout"]["template"] == sent["layout"]["template"]
    assert shown["data"][0]["y"] == [1, 2] and shown["layout"]["title"]["text"] == "t"
    assert "template" not in fig["layout"]  # the figure itself is left as it was
