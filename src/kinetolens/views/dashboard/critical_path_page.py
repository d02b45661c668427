"""The dashboard's Critical path page: what bounds the step chosen in the left panel (or the steps the report shows).

It shows what the report's section shows
(:class:`~kinetolens.views.critical_path_section.CriticalPathSection`, computed
once per trace and step and kept in the trace's memo): the verdict, cards with
the length, a stacked bar per step, and the tables, which the browser pages
through ``/api/table/critical_path_<name>`` like every other table.  A
table without rows is one line saying why, never an empty table.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from kinetolens.views import units
from kinetolens.views.critical_path_section import TOPS, CriticalPathSection, critical_path_section, split_figure
from kinetolens.views.dashboard.blocks import Block, figure, table, text
from kinetolens.views.dashboard.sources import Ctx

VIEW = "critical_path"
PREFIX = "critical_path_"


def section(ctx: Ctx) -> CriticalPathSection | str:
    """The section of the chosen step, memoized per step; with none chosen,
    the report's (every complete step, or a spread sample of a long trace's)."""
    return ctx.memo(("critical_path", ctx.step), lambda: critical_path_section(ctx.trace, ctx.step))


def _which(s: CriticalPathSection) -> list[str]:
    """The card naming what the page covers: a step, several, or a window that is no step."""
    first = s.paths[0].window
    if len(s.paths) > 1:
        return ["steps", f"{len(s.paths)} of {s.of}" if s.of > len(s.paths) else str(len(s.paths))]
    return ["step", str(first.step)] if first.step is not None else ["window", first.label]


def view(ctx: Ctx) -> list[Block]:
    s = section(ctx)
    if isinstance(s, str):
        return [text(s, "warn")]
    steps = len(s.paths)
    cards = [
        ["critical path" + (" per step (mean)" if steps > 1 else ""), units.duration(s.mean_length_us)],
        ["span" + (" per step (mean)" if steps > 1 else ""), units.duration(s.span_us / steps)],
        _which(s),
    ]
    top = s.summary.sort("time_us", descending=True).row(0, named=True) if s.summary.height else None
    if top is not None:
        cards.append(["bound by", f"{top['bound']} ({units.percent(top['share_pct'] / 100)})"])
    blocks: list[Block] = [text(s.verdict, "verdict"), {"type": "cards", "items": cards}]
    blocks += [text(n) for n in s.notes]
    blocks.append(figure(split_figure(s)))
    blocks.append(table(PREFIX + "steps", "Per step: length, span and the bound that holds the most of it", sort=None))
    blocks.append(table(PREFIX + "summary", s.summary_title, sort=None))
    for key, (title, _, _) in TOPS.items():
        if s.tops[key].height:
            blocks.append(table(PREFIX + key, title, sort="time_us"))
        else:
            blocks.append(text(s.empty_line(key)))
    return blocks


def _frame(pick: Callable[[CriticalPathSection], pl.DataFrame]) -> Callable[[Ctx], pl.DataFrame]:
    def source(ctx: Ctx) -> pl.DataFrame:
        s = section(ctx)
        return pl.DataFrame() if isinstance(s, str) else pick(s)

    return source


#: The page's tables, by the name the browser asks for.
SOURCES: dict[str, Callable[[Ctx], pl.DataFrame]] = {
    PREFIX + "steps": _frame(lambda s: s.steps),
    PREFIX + "summary": _frame(lambda s: s.summary),
    **{PREFIX + key: _frame(lambda s, key=key: s.tops[key]) for key in TOPS},  # type: ignore[misc]
}
