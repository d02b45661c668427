"""The critical path across a run's ranks, as the report and the dashboard show it.

Every number comes from :mod:`kinetolens.analysis.paths.cross_rank_run` (over
:mod:`kinetolens.analysis.paths.cross_rank_path`); this module names the columns
so that :func:`kinetolens.views.units.display` formats them (``time_us`` in
one unit per column, ``share_pct`` as a percentage, ``held_ms``), reads
ranks as "rank 5" and the others as "62 other ranks", and draws two charts:
what bounds each step's path, and which ranks hold it.  The report
(:mod:`.report_html`, :mod:`.report_md`) and the dashboard's Distributed
page (:mod:`.dashboard.cross_rank_path_page`) render the same
:class:`CrossRankSection`, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from kinetolens.analysis.paths.cross_rank_path import KIND_WORDS, common_steps
from kinetolens.analysis.paths.cross_rank_run import TOP_RANKS, RunPath, run_path
from kinetolens.errors import TraceError
from kinetolens.model.vocabulary import BOUND_WORDS
from kinetolens.registry.kernel_names import short_names
from kinetolens.views import units
from kinetolens.views.critical_path_section import bounds_figure, stacked_path_figure
from kinetolens.views.plot_spec import Figure

if TYPE_CHECKING:
    from kinetolens.analysis.paths.cross_rank_path import RankGraphs

TITLE = "Critical path across ranks"
#: Verdict lines shown (one per step); the per step table has every step.
MAX_VERDICTS = 10
#: Rows of the collectives and work tables.
TOP_ROWS = 10
#: The tables, in order: attribute -> heading.
TABLES = {
    "steps": "Per step: the path's length, the slowest rank's step and the rank gating it",
    "summary": "What bounds the path",
    "by_rank": "Path time per rank",
    "gates": "Collectives on the path, and the rank each waited for",
    "work": "The largest work on the path",
}
#: The ranks chart's colour for the ranks not named.
OTHERS_COLOR = "#bab0ac"
#: Bounds of GPU work: their names are kernels, shortened.
_GPU = ("launch_overhead", "kernel_gap", "gpu_compute", "gpu_memory", "communication")
#: The ranks chart's colours, one per named rank in order (plotly's default cycle).
RANK_COLORS = ("#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880", "#ff97ff", "#fecb52")


@dataclass
class CrossRankSection:
    """A run's cross-rank path over its steps, as tables ready to display."""

    run: RunPath
    #: How many ranks the run has.
    ranks: int
    #: ``step``, ``length_us``, ``slowest_rank_step_us``, ``gated_by``, ``mostly``, ``share_pct``.
    steps: pl.DataFrame
    #: ``bound``, ``time_us``, ``share_pct``: all steps together.
    summary: pl.DataFrame
    #: ``rank`` ("rank 5", "62 other ranks"), ``time_us``, ``share_pct``: all steps together.
    by_rank: pl.DataFrame
    #: ``step``, ``collective``, ``call``, ``waited_for`` ("rank 5"), ``held_ms``.
    gates: pl.DataFrame
    #: ``rank``, ``name``, ``bound``, ``time_us``, ``share_pct``.
    work: pl.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def headline(self) -> str:
        n = len(self.run.paths)
        what = f"step {self.run.paths[0].step}" if n == 1 else f"{n} steps"
        return (
            f"{self.ranks} ranks, {what}: path {units.duration(self.run.length_us / n)}"
            f"{' per step (mean)' if n > 1 else ''}; the slowest rank's step {units.duration(self.run.slowest_us / n)}"
        )

    def title(self, attr: str) -> str:
        """The heading of the ``attr`` table (one of :data:`TABLES`)."""
        n = len(self.run.paths)
        if attr == "summary" and n > 1:
            return f"{TABLES[attr]}, {n} steps together"
        on = int(self.run.ranks["ranks"].sum()) if self.run.ranks.height else 0
        if attr == "by_rank" and on < self.ranks:
            return f"{TABLES[attr]} ({on} of the {self.ranks} ranks are on it)"
        return TABLES[attr]

    @property
    def verdicts(self) -> list[str]:
        return self.run.verdicts[:MAX_VERDICTS]

    @property
    def more_verdicts(self) -> str | None:
        """The line under the verdicts where the run has more steps than are listed."""
        extra = len(self.run.paths) - MAX_VERDICTS
        return f"{extra} more step{'s' if extra > 1 else ''}: the per step table names the rank that gates each." if extra > 0 else None

    @property
    def gates_empty(self) -> str:
        return "No collective lies on the path of any step: each step's path stays on its ranks' own work."


def _label(bound: str) -> pl.Expr:
    return pl.col(bound).replace_strict(BOUND_WORDS, default=pl.col(bound), return_dtype=pl.String)


def _rank_names() -> pl.Expr:
    """"rank 5", and the others' row as "62 other ranks"."""
    return (
        pl.when(pl.col("rank").is_not_null())
        .then(pl.format("rank {}", pl.col("rank")))
        .otherwise(pl.format("{} other rank", pl.col("ranks")) + pl.when(pl.col("ranks") > 1).then(pl.lit("s")).otherwise(pl.lit("")))
    )


def _rank_label(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(label=_rank_names())


def section_from_paths(run: RunPath, ranks: int) -> CrossRankSection:
    """The display tables of ``run`` (a run of ``ranks`` ranks)."""
    top_bound = run.split.sort("us", descending=True).unique("step", keep="first")
    steps = run.steps.join(top_bound.select("step", mostly="bound_by", share_pct="pct"), on="step", how="left").sort("step")
    steps = steps.select(
        "step",
        length_us="length_us",
        slowest_rank_step_us="slowest_step_us",
        gated_by=pl.when(pl.col("gate_rank").is_not_null()).then(pl.format("rank {}", pl.col("gate_rank"))).otherwise(pl.lit("-")),
        mostly=_label("mostly"),
        share_pct="share_pct",
    )
    summary = run.summary.filter(pl.col("us") > 0).sort("us", descending=True).select(bound=_label("bound_by"), time_us="us", share_pct="pct")
    by_rank = _rank_label(run.ranks).select(rank="label", time_us="us", share_pct="pct")
    gates = run.gates.select(
        "step",
        collective=pl.col("kind").replace_strict(KIND_WORDS, default=pl.col("collective"), return_dtype=pl.String),
        call="seq",
        waited_for=pl.format("rank {}", pl.col("gate_rank")),
        held_ms="held_ms",
    )
    work = run.work
    if work.height:
        gpu = pl.col("bound_by").is_in(_GPU)
        work = work.with_columns(pl.when(gpu).then(short_names(work["name"])).otherwise(pl.col("name")).alias("name"))
        work = work.select(rank=pl.format("rank {}", pl.col("rank")), name="name", bound=_label("bound_by"), time_us="us", share_pct="pct")
    else:
        work = pl.DataFrame(schema={"rank": pl.String, "name": pl.String, "bound": pl.String, "time_us": pl.Float64, "share_pct": pl.Float64})
    return CrossRankSection(run=run, ranks=ranks, steps=steps, summary=summary, by_rank=by_rank, gates=gates, work=work)


def cross_rank_section(
    graphs: list[RankGraphs] | str | None, step: int | None = None, top_ranks: int = TOP_RANKS
) -> CrossRankSection | str | None:
    """The section of every step the ranks share (``step``: that one where they share it),
    the one line saying why there is none, or None for a run of one rank."""
    from kinetolens.runs.graphs import run_paths

    if graphs is None:
        return None
    if isinstance(graphs, str):
        return f"{TITLE} left out: {graphs}."
    if len(graphs) < 2:
        return None
    notes = []
    if step is not None and step not in common_steps(graphs):
        notes.append(f"Not every rank has step {step} whole: every step the ranks share is shown.")
        step = None
    try:
        paths = run_paths(graphs, step)
    except TraceError as exc:
        return f"{TITLE} left out: the run {exc.problem}."
    section = section_from_paths(run_path(paths, top_ranks, TOP_ROWS), len(graphs))
    section.notes = notes
    return section


def bounds_per_step_figure(section: CrossRankSection) -> Figure:
    """One bar per step, stacked by what bounds its path across ranks."""
    split = section.run.split.select(
        window=pl.format("step {}", pl.col("step")), bound_by="bound_by", time_us="us", share_pct="pct"
    )
    return bounds_figure(split, "What bounds each step's path across ranks")


def ranks_per_step_figure(section: CrossRankSection) -> Figure:
    """One bar per step, stacked by the rank whose work the path runs through (the others as one part)."""
    frame = _rank_label(section.run.rank_steps).filter(pl.col("us") > 0)
    steps = [f"step {cp.step}" for cp in section.run.paths]
    named = [r for r in section.run.ranks["rank"].to_list() if r is not None]
    bars = []
    for i, rank in enumerate([*named, None]):
        rows = frame.filter(pl.col("rank").is_null() if rank is None else pl.col("rank") == rank)
        if rows.height == 0:
            continue
        label = f"rank {rank}" if rank is not None else "other ranks"
        bars.append(
            {
                "type": "bar",
                "y": [f"step {s}" for s in rows["step"].to_list()],
                "x": (rows["us"] / 1000).to_list(),
                "customdata": [[units.percent(p / 100), t] for p, t in zip(rows["pct"].to_list(), rows["label"].to_list(), strict=True)],
                "orientation": "h",
                "name": label,
                "marker": {"color": OTHERS_COLOR if rank is None else RANK_COLORS[i % len(RANK_COLORS)]},
                "hovertemplate": "%{y}<br>%{customdata[1]}: %{x:,.3f} ms (%{customdata[0]})<extra></extra>",
            }
        )
    return stacked_path_figure(bars, "Path time per rank, each step", steps)


def figures(section: CrossRankSection) -> dict[str, Figure]:
    """The section's charts, by name, in order."""
    return {"bounds": bounds_per_step_figure(section), "ranks": ranks_per_step_figure(section)}
