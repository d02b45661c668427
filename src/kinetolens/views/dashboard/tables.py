"""Server-side sorting, filtering and paging of analysis tables.

The browser never receives a whole table: it asks for one page sorted on a
column and filtered by a search text, and gets the rows it draws plus the
counts it needs for the pager.  Sorting a polars frame of a few hundred
thousand rows takes milliseconds, so the analysis result is memoized and
each request only orders and slices it.  Each page also carries its cells
as the text a person reads (:func:`display`, through :mod:`kinetolens.views.units`):
90.3%, 2.60 GiB, 5.51 TFLOP, times in one unit per column; the raw values
stay in the page for sorting, tooltips and tests.  A ``kernel`` column
holds recorded kernel names in every table (kernels, an op's kernels, the
diff): its cells read as the short name the CLI shows
(:mod:`kinetolens.registry.kernel_names`), the recorded one stays the raw
value (the cell's tooltip) unless ``full_names`` asks for it as the text.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from kinetolens.registry.kernel_names import short_kernel_name, short_names
from kinetolens.views.units import display

MAX_LIMIT = 500
#: Columns of recorded kernel names, shown by their short form.
KERNEL_COLUMNS = ("kernel",)


def _searchable(frame: pl.DataFrame) -> list[str]:
    return [c for c, t in frame.schema.items() if t == pl.String or t == pl.Categorical]


def filter_rows(frame: pl.DataFrame, text: str) -> pl.DataFrame:
    """Rows where any text column contains ``text`` (case-insensitive, literal)."""
    text = text.strip().lower()
    cols = _searchable(frame)
    if not text or not cols:
        return frame
    hits = [pl.col(c).cast(pl.String).str.to_lowercase().str.contains(text, literal=True).fill_null(False) for c in cols]
    # a kernel is found by the name the page shows too (its short form drops namespaces)
    hits += [
        pl.lit(short_names(frame[c].cast(pl.String))).str.to_lowercase().str.contains(text, literal=True).fill_null(False)
        for c in KERNEL_COLUMNS if c in cols
    ]  # fmt: skip
    return frame.filter(pl.any_horizontal(hits))


def page(
    frame: pl.DataFrame,
    *,
    sort: str | None = None,
    descending: bool = True,
    search: str = "",
    offset: int = 0,
    limit: int = 50,
    full_names: bool = False,
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
    if not full_names:
        for i, col in enumerate(columns):
            if col["name"] in KERNEL_COLUMNS and col["kind"] == "text":
                for row, value in zip(text, shown[col["name"]]):
                    if value is not None:
                        row[i] = short_kernel_name(str(value))
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
