"""The critical path across ranks on the dashboard's Distributed page.

It shows what the report's subsection shows
(:class:`~kinetolens.views.cross_rank_path_section.CrossRankSection`): each
step's verdict first on the page, then, below the per-rank tables, cards, the
two charts and the tables, which the browser pages through
``/api/table/dist_path_<name>`` like every other table.  Each rank's step
graphs are built once per file, with the rest of its digest
(:func:`rank_graphs_of`), so the page never holds every rank's trace; the
section is computed once per set of files and step, and kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from kinetolens.analysis.paths.cross_rank_path import RankGraphs, rank_graphs
from kinetolens.errors import TraceError
from kinetolens.views import units
from kinetolens.views.cross_rank_path_section import TABLES, TITLE, CrossRankSection, cross_rank_section, figures
from kinetolens.views.dashboard.blocks import Block, figure, table, text
from kinetolens.views.dashboard.sources import Ctx

PREFIX = "dist_path_"
#: Initial sort of each table (None: as the section orders it).
SORTS = {"steps": None, "summary": None, "by_rank": None, "gates": None, "work": "time_us"}


def rank_graphs_of(trace: Any, rank: int) -> RankGraphs | str:
    """One rank's step graphs for its digest, or why it has none (the section says it in one line)."""
    try:
        return rank_graphs(trace, rank)
    except TraceError as exc:
        return f"rank {rank}'s trace {exc.problem}"


def _graphs(ranks: list[Any]) -> list[RankGraphs] | str | None:
    """Every rank's graphs, the first rank's reason for having none, or None (no digests, one rank)."""
    got = [d.graphs for d in ranks if d.graphs is not None]
    if len(got) < 2:
        return None
    why = next((g for g in got if isinstance(g, str)), None)
    return why if why is not None else [g for g in got if not isinstance(g, str)]


def section(ctx: Ctx) -> CrossRankSection | str | None:
    """The section of the run's ranks (the chosen step where every rank has it), memoized."""
    if ctx.ranks is None:
        return None
    ranks = ctx.ranks
    return ctx.memo(("cross_rank_path", ctx.ranks_key, ctx.step), lambda: cross_rank_section(_graphs(ranks), ctx.step))


def verdict_blocks(s: CrossRankSection | str | None) -> list[Block]:
    """The verdicts, first on the page: which rank, and which of its work, gates each step."""
    if not isinstance(s, CrossRankSection):
        return []
    out = [text(f"{TITLE}: {v}", "verdict") for v in s.verdicts]
    if s.more_verdicts:
        out.append(text(s.more_verdicts))
    return out


def blocks(s: CrossRankSection | str | None) -> list[Block]:
    """The rest of the section: cards, the two charts, the tables (or the one line saying why there is none)."""
    if s is None:
        return []
    if isinstance(s, str):
        return [text(s, "warn")]
    n = len(s.run.paths)
    mean = " per step (mean)" if n > 1 else ""
    top = s.summary.row(0, named=True) if s.summary.height else None
    gate = s.by_rank.row(0, named=True) if s.by_rank.height else None
    cards = [
        ["critical path across ranks" + mean, units.duration(s.run.length_us / n)],
        ["slowest rank's step" + mean, units.duration(s.run.slowest_us / n)],
        ["steps", str(n)],
    ]
    if top is not None:
        cards.append(["bound by", f"{top['bound']} ({units.percent(top['share_pct'] / 100)})"])
    if gate is not None:
        cards.append(["most of the path on", f"{gate['rank']} ({units.percent(gate['share_pct'] / 100)})"])
    out: list[Block] = [text(f"{TITLE}: {s.headline}."), {"type": "cards", "items": cards}]
    out += [text(note) for note in s.notes]
    out.append({"type": "row", "blocks": [figure(fig) for fig in figures(s).values()]})
    for attr in TABLES:
        if getattr(s, attr).height:
            out.append(table(PREFIX + attr, s.title(attr), sort=SORTS[attr]))
        elif attr == "gates":
            out.append(text(s.gates_empty))
    return out


def _frame(attr: str) -> Callable[[Ctx], pl.DataFrame]:
    def source(ctx: Ctx) -> pl.DataFrame:
        s = section(ctx)
        return getattr(s, attr) if isinstance(s, CrossRankSection) else pl.DataFrame()

    return source


#: The section's tables, by the name the browser asks for.
SOURCES: dict[str, Callable[[Ctx], pl.DataFrame]] = {PREFIX + attr: _frame(attr) for attr in TABLES}
