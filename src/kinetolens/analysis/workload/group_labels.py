"""Attributes of a group that is not keyed by them: one value, or say it is mixed.

A table grouped by op name that shows "the" shape, dtype or direction of
each row would show one call's value for all of them (``aten::add_`` runs in
forward, backward and the optimizer, with 32 shapes).  So a shown attribute
is the value when every call has the same one; otherwise the distinct values
with their call counts (:func:`listed`, for short words such as a direction
or an op name) or ``mixed (N distinct)`` (:func:`mixed`, for shapes and
dtype lists, whose values are long and contain commas).  Calls without the
attribute (null) are left out, unless :func:`counts` is told what to call them.

Use in two steps: :func:`counts` inside ``group_by().agg()``, then
:func:`listed` or :func:`mixed` on the aggregated frame, under the same name.
"""

from __future__ import annotations

import polars as pl

#: Values :func:`listed` names before it sums the rest as ``+N more``.
MAX_LISTED = 3


def counts(src: str, out: str | None = None, *, missing: str | None = None) -> pl.Expr:
    """Aggregation: the group's distinct values of ``src`` with their counts;
    nulls are left out, or counted as ``missing`` where that says something
    (a kernel no op launched)."""
    values = pl.col(src).cast(pl.String)
    values = values.drop_nulls() if missing is None else values.fill_null(missing)
    return values.value_counts(name="n").alias(out or src)


def _ordered(col: str) -> pl.Expr:
    """Most frequent first; ties by value, so the text does not depend on row order."""
    return pl.col(col).list.eval(
        pl.element().sort_by(pl.element().struct.field("n"), pl.element().struct[0], descending=[True, False])
    )


def _single(col: str, several: pl.Expr) -> pl.Expr:
    n = pl.col(col).list.len()
    first = _ordered(col).list.first().struct[0]
    return pl.when(n == 1).then(first).when(n > 1).then(several).otherwise(pl.lit(None, pl.String)).alias(col)


def mixed(col: str) -> pl.Expr:
    """The value when the group has one, else ``mixed (N distinct)``; null when none is known."""
    return _single(col, pl.format("mixed ({} distinct)", pl.col(col).list.len()))


def listed(col: str, top: int = MAX_LISTED) -> pl.Expr:
    """The value when the group has one, else ``a 12, b 3`` (calls per value, most first, ``+N more`` past ``top``)."""
    ordered = _ordered(col)
    shown = ordered.list.head(top).list.eval(
        pl.format("{} {}", pl.element().struct[0], pl.element().struct.field("n"))
    ).list.join(", ")
    rest = pl.col(col).list.len().cast(pl.Int64) - top
    several = pl.when(rest > 0).then(pl.format("{}, +{} more", shown, rest)).otherwise(shown)
    return _single(col, several)
