"""The distributed view of a run as one typed result.

``kinetolens dist``, the cross-rank report and the dashboard's Distributed
page all render this object, so a rank's step time or a collective's bus
bandwidth is computed once and reads the same in each of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from kinetolens.analysis.finding import Finding
from kinetolens.analysis.ranks.clocks import clock_offsets, transfer_vs_skew
from kinetolens.analysis.ranks.dimensions import dimension_stats, dimension_totals
from kinetolens.analysis.ranks.distributed import RankSummary, collective_stats, run_overview, step_spread, step_times
from kinetolens.analysis.ranks.mixed_runs import mixed_run_notes
from kinetolens.analysis.ranks.pipeline import pipeline_table
from kinetolens.analysis.ranks.stragglers import straggler_findings, stragglers

#: The tables of a :class:`DistReport`, in the order every view shows them.
TABLES = ("ranks", "steps", "pipeline", "dimension_totals", "dimensions", "collectives", "skew", "clocks", "stragglers")


@dataclass(frozen=True)
class DistReport:
    """Every rank of a run side by side."""

    #: Ranks present, world size, backend and the step-time spread (:func:`run_overview`).
    overview: dict[str, Any]
    #: Per rank: mean step, compute, communication, overlap, exposed communication (ms per step).
    ranks: pl.DataFrame
    #: Per step: min / mean / max over ranks and the slowest rank.
    steps: pl.DataFrame
    #: Per pipeline stage: its schedule, microbatches, step and compute time, bubble and the
    #: schedule's ideal bubble (:func:`~kinetolens.analysis.ranks.pipeline.pipeline_table`); empty without one.
    pipeline: pl.DataFrame
    #: Per parallel dimension, its groups together (:func:`~kinetolens.analysis.ranks.dimensions.dimension_totals`).
    dimension_totals: pl.DataFrame
    #: Per parallel dimension and process group: its evidence (``basis``), calls, bytes, time,
    #: bandwidth, exposed time per step and its share of the step (:mod:`~kinetolens.analysis.ranks.dimensions`).
    dimensions: pl.DataFrame
    #: Per collective and rank: synchronizing vs transfer time, algorithm and bus bandwidth.
    collectives: pl.DataFrame
    #: Per dimension, group and collective: transfer time vs arrival and launch skew across ranks
    #: on the aligned clocks (:func:`~kinetolens.analysis.ranks.clocks.transfer_vs_skew`).
    skew: pl.DataFrame
    #: Per rank: its clock's offset from the reference rank, with its uncertainty
    #: (:func:`~kinetolens.analysis.ranks.clocks.clock_offsets`).
    clocks: pl.DataFrame
    #: Per rank: how late it arrives at collectives and what that costs the others.
    stragglers: pl.DataFrame
    findings: tuple[Finding, ...]
    #: What the figures leave out (steps cut short by the end of profiling), one sentence each.
    notes: tuple[str, ...]

    def tables(self) -> dict[str, pl.DataFrame]:
        return {name: getattr(self, name) for name in TABLES}

    def to_json(self) -> dict[str, Any]:
        """The JSON document ``kinetolens dist --json`` prints."""
        return {
            "run": self.overview,
            **{name: frame.to_dicts() for name, frame in self.tables().items()},
            "recommendations": [f.to_dict() for f in self.findings],
        }


def cut_step_notes(summaries: list[RankSummary]) -> list[str]:
    """One sentence per set of steps that profiling ended inside of, naming the ranks."""
    cut: dict[tuple[int, ...], list[int]] = {}
    for s in summaries:
        if s.cut_steps:
            cut.setdefault(tuple(s.cut_steps), []).append(s.rank)
    return [
        f"step {', '.join(map(str, steps))} of rank {', '.join(map(str, ranks))} was cut short by the end "
        "of profiling: left out of the per-step figures"
        for steps, ranks in cut.items()
    ]


def dist_report(summaries: list[RankSummary]) -> DistReport:
    """The distributed view of the ranks' summaries (:func:`kinetolens.analysis.ranks.distributed.rank_summary`)."""
    straggling = stragglers(summaries)
    return DistReport(
        overview=run_overview(summaries),
        ranks=step_times(summaries),
        steps=step_spread(summaries),
        pipeline=pipeline_table(summaries),
        dimension_totals=dimension_totals(summaries),
        dimensions=dimension_stats(summaries),
        collectives=collective_stats(summaries),
        skew=transfer_vs_skew(summaries),
        clocks=clock_offsets(summaries),
        stragglers=straggling,
        findings=tuple(straggler_findings(summaries, straggling)),
        notes=(*mixed_run_notes(summaries), *cut_step_notes(summaries)),
    )
