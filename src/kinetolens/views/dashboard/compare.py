"""The views over more than one trace: Distributed (a run's ranks) and Diff (two runs).

Both call analyses by their public names only: ``kinetolens.analysis.diff``
for the diff and, where present, ``kinetolens.analysis.ranks.distributed`` for
collective statistics and stragglers.  Per-rank step times and the
compute/communication overlap come from the single-trace analyses
(:mod:`kinetolens.analysis.summary`, :mod:`kinetolens.analysis.gputime.idle`) run on
each rank, so the Distributed view works with or without that module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from kinetolens.analysis import diff as diff_module
from kinetolens.analysis.diff_environment import environment_warning
from kinetolens.analysis.gputime.idle import comm_comp_overlap, temporal_breakdown
from kinetolens.analysis.ranks.dist_report import DistReport, dist_report
from kinetolens.analysis.ranks.distributed import rank_summary
from kinetolens.model.vocabulary import CATEGORY_WORDS
from kinetolens.analysis.session import whole_steps
from kinetolens.views import figures, units
from kinetolens.views.dashboard import cross_rank_path_page
from kinetolens.views.dashboard.blocks import Block, figure, table, text
from kinetolens.views.plot_spec import Figure, update_layout
from kinetolens.views.dashboard.sources import BadParameter, Ctx

DIFF_LEVELS = ("step", "module", "op", "kernel")


# -- distributed --------------------------------------------------------------

@dataclass(frozen=True)
class RankDigest:
    """What the Distributed view reads from one rank: small tables, kept per file.

    The store keeps these instead of whole traces, so a run of more ranks
    than loaded traces kept still shows every rank (each loaded once)."""

    #: ``analysis.distributed.rank_summary`` (None where that module is missing).
    summary: Any | None
    #: ``temporal_breakdown``: compute, non-compute, idle (one row; none without GPU work).
    temporal: pl.DataFrame
    #: ``comm_comp_overlap``: communication overlapped by compute.
    overlap: pl.DataFrame
    #: ``analysis.cross_rank_path.rank_graphs``: the step graphs the critical
    #: path across ranks joins, or why the trace has none (one line).
    graphs: Any = None


def rank_digest(trace: Any, rank: int | None = None) -> RankDigest:
    """One rank's digest; ``rank`` is its rank where the trace does not say.

    Every table of the digest carries the rank the summary settled on, so a
    rank known only from its file name is that rank in every table and bar."""
    summary = rank_summary(trace, rank)
    settled = summary.rank if summary is not None else (trace.rank if trace.rank is not None else rank)
    tag = pl.lit(settled, pl.Int64).alias("rank")
    return RankDigest(
        summary=summary,
        temporal=temporal_breakdown(whole_steps(trace)).with_columns(tag),  # as `kinetolens idle`
        overlap=comm_comp_overlap(whole_steps(trace)).with_columns(tag),  # and the report
        graphs=cross_rank_path_page.rank_graphs_of(trace, settled),
    )


def _digests(ctx: Ctx) -> list[RankDigest]:
    """Every rank's digest (the page asks for ``ranks=all``), else the trace's own."""
    if ctx.ranks is not None:
        return ctx.ranks
    return [ctx.memo(("digest", None), lambda: rank_digest(ctx.trace))]


def _summaries(ctx: Ctx) -> list[Any]:
    """Each rank's ``RankSummary`` (``analysis.distributed``)."""
    return [d.summary for d in _digests(ctx)]


def _temporal(ctx: Ctx) -> list[pl.DataFrame]:
    """Each rank's temporal breakdown, ranks without GPU work left out."""
    return [d.temporal for d in _digests(ctx) if d.temporal.height]


def rank_overlap(ctx: Ctx) -> pl.DataFrame:
    """Per rank: compute, non-compute and idle share of the GPU span, and communication overlapped by compute."""
    parts = [d.temporal.join(d.overlap, on="rank", how="left") for d in _digests(ctx)]
    parts = [p for p in parts if p.height]
    return pl.concat(parts).sort("rank") if parts else pl.DataFrame(schema={"rank": pl.Int64})


def _dist(ctx: Ctx) -> DistReport:
    """The run's distributed view, as ``kinetolens dist`` computes it, once per set of ranks."""
    return ctx.memo(("dist_report", ctx.ranks_key), lambda: dist_report(_summaries(ctx)))


def _run_table(name: str) -> Callable[[Ctx], pl.DataFrame]:
    """One table of the run's :class:`DistReport`, shares in percent."""
    def source(ctx: Ctx) -> pl.DataFrame:
        return units.shares_as_percent(getattr(_dist(ctx), name))

    return source


#: source -> (table of the DistReport, title, initial sort)
RUN_TABLES = {
    "dist_steps": ("ranks", "Step time per rank (ms)", "rank"),
    "dist_spread": ("steps", "Spread of each step across ranks", "step"),
    "dist_dimensions": ("dimensions", "Parallel dimensions: time, bandwidth, exposed time per step", None),
    "dist_collectives": ("collectives", "Collectives: synchronizing vs transfer time, bus bandwidth", None),
    "dist_skew": ("skew", "Transfer vs arrival skew per collective (us per call, aligned clocks)", None),
    "dist_clocks": ("clocks", "Clock offsets from the reference rank", "rank"),
    "dist_stragglers": ("stragglers", "Stragglers", None),
}  # fmt: skip


def _temporal_figure(temporal: list[pl.DataFrame]) -> Figure:
    """The per-rank GPU time bars, legend above them so that a run of two ranks still shows all three parts."""
    fig = figures.temporal_figure(pl.concat(temporal).sort("rank") if temporal else pl.DataFrame())
    if temporal:
        update_layout(fig, legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0.0,
                                   "traceorder": "normal"},
                      margin={"t": 90})  # fmt: skip
    return fig


def _same_rank_twice(ranks: list[RankDigest]) -> str | None:
    """The first rank two traces claim, named with both files (as ``kinetolens dist`` refuses it)."""
    seen: dict[int, str] = {}
    for d in ranks:
        s = d.summary
        if s is None:
            continue
        if s.rank in seen:
            return f"rank {s.rank} appears twice ({Path(seen[s.rank]).name}, {Path(s.path).name})"
        seen[s.rank] = s.path
    return None


def distributed(ctx: Ctx) -> list[Block]:
    ranks = _digests(ctx)
    twice = _same_rank_twice(ranks)
    if twice is not None:
        return [text(f"No cross-rank view: {twice}; every figure would count that rank twice.", "warn")]
    blocks: list[Block] = []
    if len(ranks) < 2:
        blocks.append(text("This run has one trace; the Distributed view compares the ranks of a run."))
    path = cross_rank_path_page.section(ctx)
    blocks += cross_rank_path_page.verdict_blocks(path)
    temporal = _temporal(ctx)
    tables = RUN_TABLES
    blocks += [
        *[table(src, title, sort=sort, descending=sort is None) for src, (_, title, sort) in tables.items()
          if src in ("dist_steps", "dist_spread")],
        figure(_temporal_figure(temporal)),
        table("dist_overlap", "Compute, communication and overlap per rank", sort="rank",
              descending=False),
        *[table(src, title, sort=sort) for src, (_, title, sort) in tables.items()
          if src not in ("dist_steps", "dist_spread")],
        *cross_rank_path_page.blocks(path),
    ]  # fmt: skip
    return blocks


# -- diff -------------------------------------------------------------------------

def _diff(ctx: Ctx) -> Any:
    if ctx.other is None:
        raise BadParameter("pick a second run to compare with")
    other = ctx.other
    return ctx.memo(("diff", other.trace.path), lambda: diff_module.compare(ctx.trace, other.trace, levels=DIFF_LEVELS))


def _diff_source(level: str) -> Callable[[Ctx], pl.DataFrame]:
    def source(ctx: Ctx) -> pl.DataFrame:
        table = _diff(ctx).tables[level]
        # kernel names under the column every dashboard table shows by their short form
        return table.rename({"name": "kernel"}) if level == "kernel" else table

    return source


def _largest(change: dict[str, Any] | None, labels: dict[str, str]) -> str:
    """``data loading -58.076 ms``: the step-time category that moved most, first on the page as in ``kinetolens diff``."""
    return "-" if change is None else f"{labels[change['category']]} {change['delta_us'] / 1000:+,.3f} ms"


def diff_view(ctx: Ctx) -> list[Block]:
    picker: Block = {"type": "diff-picker"}
    if ctx.other is None:
        return [picker, text("Pick the run to compare with (the experiment); the run in the left panel is the baseline.")]
    summary = _diff(ctx).summary
    b, e = summary["baseline"]["mean_step_us"], summary["experiment"]["mean_step_us"]
    delta, pct = summary["step_delta_us"], summary["regression_pct"]
    cards = [
        ["baseline mean step", "-" if b is None else f"{b / 1000:,.3f} ms"],
        ["experiment mean step", "-" if e is None else f"{e / 1000:,.3f} ms"],
        ["step delta", "-" if delta is None else f"{delta / 1000:+,.3f} ms"],
        ["change", "-" if pct is None else f"{pct:+.1f}%"],
        ["largest step change", _largest(summary["largest_step_change"], CATEGORY_WORDS)],
        ["time basis", summary["basis"]],
    ]
    warning = environment_warning(summary["environment"])
    return [
        picker,
        *([text(f"Warning: {warning}.", "warn")] if warning else []),
        {"type": "cards", "items": cards},
        *[table(f"diff_{lv}", f"{lv.capitalize()} deltas (per step, largest change first)") for lv in DIFF_LEVELS],
    ]


SOURCES: dict[str, Callable[[Ctx], pl.DataFrame]] = {
    "dist_overlap": rank_overlap,
    **cross_rank_path_page.SOURCES,
    **{src: _run_table(name) for src, (name, _, _) in RUN_TABLES.items()},
    **{f"diff_{lv}": _diff_source(lv) for lv in DIFF_LEVELS},
}
