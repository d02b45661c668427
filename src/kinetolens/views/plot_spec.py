"""Charts as plotly figure dictionaries: ``{"data": [...], "layout": {...}}``.

kinetolens' chart builders return the dictionary plotly.js draws, not a
``plotly.graph_objects.Figure``: a Figure validates every property as it is
set, which cost the report 60 ms for its memory curve of a few thousand
points and 0.1 s the first time to import plotly's validators, to check
values that kinetolens' own code writes.  The tests check every builder's
output against that validation instead (``tests/views/test_figure_specs.py``:
plotly must accept it and change nothing), so each dictionary spells out what
plotly's shortcuts would (``{"title": {"text": ...}}``, ``{"marker": {"color":
...}}``).  The report and the dashboard write the dictionaries as they are;
:func:`kinetolens.views.chart_output.styled` makes a checked Figure of one
for a notebook, and ``plotly.graph_objects.Figure(fig)`` takes any of them.
"""

from __future__ import annotations

from typing import Any

#: A plotly figure as a dictionary (``data``: the traces, ``layout``).
Figure = dict[str, Any]


def figure(data: list[dict[str, Any]] | None = None, **layout: Any) -> Figure:
    """A figure of ``data`` (trace dictionaries, each with its ``type``) and ``layout``."""
    return {"data": list(data or []), "layout": layout}


def title(text: str) -> dict[str, str]:
    """A title as plotly's layout and axes take it."""
    return {"text": text}


def update_layout(fig: Figure, **changes: Any) -> Figure:
    """``fig`` with ``changes`` merged into its layout as plotly's
    ``update_layout`` does: a dictionary into the one already there, key by
    key; any other value replaces."""
    _merge(fig["layout"], changes)
    return fig


def update_traces(fig: Figure, trace_type: str, **changes: Any) -> Figure:
    """``changes`` set on every trace of ``trace_type`` (``"pie"``, ``"bar"`` ...)."""
    for trace in fig["data"]:
        if trace.get("type") == trace_type:
            _merge(trace, changes)
    return fig


def _merge(into: dict[str, Any], changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
