"""How a figure leaves kinetolens: a chart in the report's HTML, or the
dashboard's JSON, each with the look every chart shares.

The figures are plotly figure dictionaries (:mod:`kinetolens.views.plot_spec`)
and are written as they are, without plotly's figure objects.  The look
(plotly's ``plotly_white`` template) is put into the written figure here
rather than into each figure as it is built: one dictionary entry.  In a
notebook, :func:`styled` makes a ``plotly.graph_objects.Figure`` with the
report's look.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import TYPE_CHECKING, Any

import plotly.io as pio

from kinetolens.views.plot_spec import Figure
from kinetolens.views.report_frames import CHART_PX

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: The plotly template every written chart has.
TEMPLATE = "plotly_white"
#: The chart's options in the page: no plotly logo; it follows its box's size.
CHART_CONFIG = {"displaylogo": False, "responsive": True}


@functools.cache
def template() -> dict[str, Any]:
    """:data:`TEMPLATE` as plotly ships it (the file plotly builds its own from)."""
    text = resources.files("plotly").joinpath(f"package_data/templates/{TEMPLATE}.json").read_text("utf-8")
    return json.loads(text)


def figure_spec(fig: Figure, min_height: int | None = None) -> Figure:
    """``fig`` as plotly.js draws it, with :data:`TEMPLATE`; at least ``min_height``
    pixels tall where it sets a height of its own (one that does not grows with its box)."""
    spec = fig.to_plotly_json() if hasattr(fig, "to_plotly_json") else fig  # a plotly Figure of the user's too
    layout = {**spec.get("layout", {}), "template": template()}
    if min_height is not None and layout.get("height") is not None and layout["height"] < min_height:
        layout["height"] = min_height
    return {**spec, "layout": layout}


def chart_html(fig: Figure, div_id: str, min_height: int | None = None) -> str:
    """``fig`` as a ``<div class="kl-chart">`` of the page (plotly.js is the page's own)."""
    html = pio.to_html(
        figure_spec(fig, min_height), validate=False, include_plotlyjs=False, full_html=False, div_id=div_id,
        default_height=f"{CHART_PX}px", config=CHART_CONFIG,
    )  # fmt: skip
    # plotly's own wrapper differs between its versions ("<div>", "<div style=...>"): ours around it
    return f'<div class="kl-chart">{html}</div>'


def figure_json(fig: Figure) -> str:
    """``fig`` as the dashboard sends it."""
    return pio.to_json(figure_spec(fig), validate=False)


def styled(fig: Figure) -> go.Figure:
    """``fig`` as a plotly Figure with the report's look, to show it so in a notebook
    (plotly checks every property of it here)."""
    import plotly.graph_objects as go

    return go.Figure(figure_spec(fig))
