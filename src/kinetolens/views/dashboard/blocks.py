"""The pieces a dashboard view is made of: cards, figures, tables (by source name) and text."""

from __future__ import annotations

from typing import Any

import msgspec

Block = dict[str, Any]


def figure(fig: Any, **extra: Any) -> Block:
    from kinetolens.views.chart_output import figure_json

    return {"type": "figure", "figure": msgspec.Raw(figure_json(fig).encode()), **extra}


def table(source: str, title: str, sort: str | None = None, **extra: Any) -> Block:
    return {"type": "table", "source": source, "title": title, "sort": sort, **extra}


def text(message: str, kind: str = "note") -> Block:
    return {"type": "text", "kind": kind, "text": message}


def unavailable(what: str, why: str) -> Block:
    """The note a view shows instead of an empty table or chart when the trace lacks its data.

    Nsight exports, CPU-only and pre-1.10 Kineto traces each lack some of
    what a view draws; saying so beats an empty chart or a column error.
    """
    return text(f"{what} not available for this trace: {why}.", "warn")
