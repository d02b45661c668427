"""Every table source of the dashboard by name, from each page's module, and the memoized lookup."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from kinetolens.views.dashboard import compare, critical_path_page, phases_page, sources
from kinetolens.views.dashboard.sources import SOURCE_ARGS, Ctx, without_device_columns
from kinetolens.views.dashboard.tables import rounded

Source = Callable[[Ctx], pl.DataFrame]


def _merged(*tables: dict[str, Source]) -> dict[str, Source]:
    """One name, one source: a name two pages both define is an error, not a silent override."""
    out: dict[str, Source] = {}
    for table_ in tables:
        clash = sorted(set(out) & set(table_))
        if clash:
            raise ValueError(f"dashboard table source(s) defined twice: {clash}")
        out.update(table_)
    return out


ALL_SOURCES = _merged(sources.SOURCES, compare.SOURCES, critical_path_page.SOURCES, phases_page.SOURCES)


def find_source(name: str) -> Source | None:
    return ALL_SOURCES.get(name)


def table(ctx: Ctx, name: str) -> pl.DataFrame:
    """The named source's frame, memoized per step and parameters, floats rounded for display."""
    source = find_source(name)
    if source is None:
        raise KeyError(name)
    other = ctx.other.trace.path if ctx.other is not None else None
    key = ("table", name, ctx.step, other, ctx.ranks_key, tuple((a, ctx.args.get(a, "")) for a in SOURCE_ARGS))
    return ctx.memo(key, lambda: rounded(without_device_columns(ctx, source(ctx))))
