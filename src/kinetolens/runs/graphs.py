"""Per-rank step graphs of a run directory, built where the traces are.

Each worker loads one rank's trace (through the cache) and returns its
:class:`~kinetolens.analysis.paths.cross_rank_path.RankGraphs`: a few arrays per
step, never the trace.  The ranks are joined in this process
(:mod:`kinetolens.analysis.paths.cross_rank_path`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kinetolens.analysis.paths.cross_rank_path import (
    CrossRankPath,
    JoinedGraph,
    RankGraphs,
    common_steps,
    cross_rank_path,
    joined_graph,
    rank_graphs,
)
from kinetolens.analysis.ranks.distributed import RankSummary, rank_summary
from kinetolens.errors import TraceError
from kinetolens.runs.executors import Executor
from kinetolens.runs.summaries import RankJob, load_rank, map_ranks

if TYPE_CHECKING:
    from kinetolens.analysis.paths.cross_rank_whatif import RunStepPrediction
    from kinetolens.analysis.paths.whatif import Change


def graphs_file(job: RankJob) -> RankGraphs:
    """Load one rank's trace and build its step graphs (in a worker)."""
    return rank_graphs(load_rank(job), job.rank)


def run_graphs(
    run_dir: str | Path,
    executor: Executor | str | None = None,
    cache: bool | str | Path = True,
    notes: list[str] | None = None,
    strict: bool = False,
) -> list[RankGraphs]:
    """Every rank's step graphs, in rank order (one trace per rank, as ``dist`` picks them; a bad rank's
    trace left out and named in ``notes`` unless ``strict``)."""
    return map_ranks(run_dir, graphs_file, executor, cache, notes, strict)


@dataclass
class RankParts:
    """One rank's summary and step graphs, from one load of its trace (picklable)."""

    rank: int
    summary: RankSummary
    #: The step graphs, or why the trace has none (its problem, one line).
    graphs: RankGraphs | str


def parts_file(job: RankJob) -> RankParts:
    """Load one rank's trace once and both summarize it and build its step graphs (in a worker)."""
    trace = load_rank(job)
    summary = rank_summary(trace, job.rank)
    try:
        graphs: RankGraphs | str = rank_graphs(trace, summary.rank)
    except TraceError as exc:
        graphs = f"rank {summary.rank}'s trace {exc.problem}"
    return RankParts(rank=summary.rank, summary=summary, graphs=graphs)


def run_summaries_and_graphs(
    run_dir: str | Path,
    executor: Executor | str | None = None,
    cache: bool | str | Path = True,
    notes: list[str] | None = None,
    strict: bool = False,
) -> tuple[list[RankSummary], list[RankGraphs] | str]:
    """Every rank's summary and step graphs, each trace loaded once (``kinetolens report RUNDIR``):
    the graphs, or the first rank's reason for having none."""
    parts = map_ranks(run_dir, parts_file, executor, cache, notes, strict)
    why = next((p.graphs for p in parts if isinstance(p.graphs, str)), None)
    graphs = [p.graphs for p in parts if not isinstance(p.graphs, str)]
    return [p.summary for p in parts], why if why is not None else graphs


def run_joined_graph(
    run_dir: str | Path,
    step: int | None = None,
    executor: Executor | str | None = None,
    cache: bool | str | Path = True,
) -> JoinedGraph:
    """The joined graph of ``step`` (default: the first step every rank has whole) of a run:
    the what-if simulator's entry point for a RUNDIR."""
    ranks = run_graphs(run_dir, executor, cache)
    return joined_graph(ranks, chosen_steps(ranks, step, run_dir)[0])


def chosen_steps(ranks: list[RankGraphs], step: int | None, where: str | Path) -> list[int]:
    """``[step]``, or every step the ranks share whole; a clear error where there is none."""
    steps = common_steps(ranks)
    if not steps:
        raise TraceError(where, "has no whole profiler step on any rank")
    if step is None:
        return steps
    if step not in steps:
        raise TraceError(where, f"has no step {step} (steps: {', '.join(map(str, steps))})")
    return [step]


def run_paths(ranks: list[RankGraphs], step: int | None = None, where: str | Path = "run") -> list[CrossRankPath]:
    """The cross-rank path of ``step``, or of every step the ranks share."""
    return [cross_rank_path(joined_graph(ranks, s)) for s in chosen_steps(ranks, step, where)]


def run_whatif(
    ranks: list[RankGraphs], changes: list[Change], step: int | None = None, where: str | Path = "run"
) -> list[RunStepPrediction]:
    """Each step (or ``step``) of a run re-timed with ``changes``
    (:func:`kinetolens.analysis.paths.cross_rank_whatif.whatif_run`)."""
    from kinetolens.analysis.paths.cross_rank_whatif import whatif_run

    return [whatif_run(joined_graph(ranks, s), changes) for s in chosen_steps(ranks, step, where)]
