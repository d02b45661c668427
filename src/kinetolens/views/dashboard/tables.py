"""Server-side sorting, filtering and paging of analysis tables.

The browser never receives a whole table: it asks for one page sorted on a
column and filtered by a search text, and gets the rows it draws plus the
counts it needs for the pager.  Sorting a polars frame of a few hundred
thousand rows takes milliseconds, so the analysis result is memoized and
each request only orders and slices it.  Each page also carries its cells
as the text a person reads (:func:`display`, through :mod:`kinetolens.views.units`):
90.3%, 2.60 GiB, 5.51 TFLOP, times in one unit per column; the raw values
stay in the page for sorting, tooltips and tests.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from kinetolens.views import units

MAX_LIMIT = 500
#: Rate columns: a plain number under a header that names the unit.
RATES = {"tflops_s": "TFLOP/s", "achieved_tflops": "TFLOP/s", "gbps": "GB/s", "achieved_gbps": "GB/s",
         "intensity": "FLOP/byte", "bus_gbps": "GB/s", "algo_gbps": "GB/s"}  # fmt: skip
#: Columns that count things, whatever their type (a mean over ranks may be a float).
COUNTS = {"calls", "count", "ranks", "steps"}
#: Byte columns that count data moved (decimal units); other ``*bytes`` / ``size`` columns are memory held.
TRAFFIC = {"bytes"}


def _searchable(frame: pl.DataFrame) -> list[str]:
    return [c for c, t in frame.schema.items() if t == pl.String or t == pl.Categorical]


def filter_rows(frame: pl.DataFrame, text: str) -> pl.DataFrame:
    """Rows where any text column contains ``text`` (case-insensitive, literal)."""
    text = text.strip().lower()
    cols = _searchable(frame)
    if not text or not cols:
        return frame
    hit = pl.any_horizontal(
        pl.col(c).cast(pl.String).str.to_lowercase().str.contains(text, literal=True).fill_null(False) for c in cols
    )
    return frame.filter(hit)


def _is_percent(name: str) -> bool:
    """Columns already in percent (0..100): ``pct``, ``*_pct``, ``pct_*`` and the profiler's occupancy (%)."""
    return name == "pct" or name.endswith("_pct") or name.startswith("pct_") or name == "occupancy"


def column_format(name: str, dtype: pl.DataType) -> tuple[str, str]:
    """How a column reads: its kind (``percent``, ``time``, ``ms``, ``memory``, ``traffic``,
    ``flops``, ``rate``, ``count``, ``number`` or ``text``) and its header label with the unit.
    Sources hold shares as percent (``*_pct``), never as 0..1 fractions."""
    if not dtype.is_numeric():
        return "text", name
    if _is_percent(name):
        if name == "pct":
            return "percent", "% of step"
        if name.startswith("pct_"):
            return "percent", "% " + name.removeprefix("pct_").replace("_", " ")
        return "percent", f"{name.removesuffix('_pct')} (%)"
    if name.endswith("_us") or name == "us":
        return "time", name.removesuffix("_us")
    if name.endswith("_ms"):
        return "ms", f"{name.removesuffix('_ms')} (ms)"
    if name in TRAFFIC or name.endswith("_traffic_bytes"):
        return "traffic", name
    if name.endswith("bytes") or name == "size":
        return "memory", name.removesuffix("_bytes")
    if name == "flops":
        return "flops", "FLOPs"
    if name in RATES:
        return "rate", RATES[name]
    for suffix, unit in (("_gbps", "GB/s"), ("_tflops", "TFLOP/s")):
        if name.endswith(suffix):
            return "rate", f"{name.removesuffix(suffix)} ({unit})"
    if dtype.is_integer() or name in COUNTS or name.endswith(("_calls", "_count")):
        return "count", name
    return "number", name


def _cell(kind: str, value: Any, scale: float) -> str:
    if units.missing(value):
        return "-"
    if kind == "percent":
        return units.percent(value / 100.0)
    if kind == "time":
        return units.in_unit(value, scale)
    if kind == "memory":
        return units.memory(value)
    if kind == "traffic":
        return units.traffic(value)
    if kind == "flops":
        return units.flops(value)
    if kind == "count":
        return units.count(value)
    if kind == "ms":
        return f"{value:,.3f}"
    if kind in ("rate", "number"):
        return units.sig(value, 3) if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def display(frame: pl.DataFrame, shown: pl.DataFrame) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """Columns (name, header label, kind, numeric) and the shown rows as the text a person reads.

    A time column takes one unit (us, ms or s) for all its rows, chosen from
    the whole table's largest value, so the column lines up as the pager moves."""
    columns, scales = [], []
    for name, dtype in shown.schema.items():
        kind, label = column_format(name, dtype)
        scale = 1.0
        if kind == "time":
            unit, scale = units.time_unit(frame[name].abs().max() if frame.height else None)  # type: ignore[arg-type]
            label = f"{label} ({unit})"
        columns.append({"name": name, "label": label, "kind": kind, "numeric": dtype.is_numeric()})
        scales.append((kind, scale))
    rows = [[_cell(k, v, sc) for (k, sc), v in zip(scales, r)] for r in shown.iter_rows()]
    return columns, rows


def page(
    frame: pl.DataFrame,
    *,
    sort: str | None = None,
    descending: bool = True,
    search: str = "",
    offset: int = 0,
    limit: int = 50,
) -> dict[str, Any]:
    """One page of ``frame`` as JSON-ready dict: columns (name, numeric), rows, counts.

    An unknown sort column is ignored rather than refused: the page's
    columns change with the grouping, and a stale choice must not break it.
    """
    total = frame.height
    frame = filter_rows(frame, search)
    if sort in frame.columns:
        frame = frame.sort(sort, descending=descending, nulls_last=True, maintain_order=True)
    else:
        sort = None
    limit = max(1, min(int(limit), MAX_LIMIT))
    offset = max(0, int(offset))
    shown = frame.slice(offset, limit)
    columns, text = display(frame, shown)
    return {
        "columns": columns,
        "rows": [list(r) for r in shown.iter_rows()],
        "text": text,
        "total": total,
        "matched": frame.height,
        "offset": offset,
        "limit": limit,
        "sort": sort,
        "descending": descending,
    }


def rounded(frame: pl.DataFrame, digits: int = 3) -> pl.DataFrame:
    """Floats rounded for display; the browser shows what the analysis computed, shorter."""
    return frame.with_columns(pl.col(c).round(digits) for c, t in frame.schema.items() if t.is_float())
