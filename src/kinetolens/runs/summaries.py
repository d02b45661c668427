"""Per-rank summaries of a run directory, computed by an executor.

Each rank's trace is loaded with the normal :func:`kinetolens.load` cache
(Parquet, keyed by file), summarized, and only the small
:class:`~kinetolens.analysis.distributed.RankSummary` comes back.  The
cross-rank analyses then run on the list of summaries in this process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kinetolens.analysis.distributed import RankSummary, rank_summary
from kinetolens.cache import default_cache_dir
from kinetolens.errors import TraceError
from kinetolens.loader import load
from kinetolens.logdir import WorkerTrace, run_traces
from kinetolens.runs.executors import Executor, executor_for


@dataclass(frozen=True)
class RankJob:
    """One rank's work, as sent to a worker (plain strings: picklable anywhere)."""

    path: str
    rank: int | None
    cache: str | None


def summarize_file(job: RankJob) -> RankSummary:
    """Load one rank's trace (through the cache) and summarize it."""
    trace = load(job.path, cache=job.cache if job.cache is not None else False)
    return rank_summary(trace, job.rank)


def rank_traces(run_dir: str | Path) -> list[WorkerTrace]:
    """The run's traces, one per rank; a clear error for an empty or missing directory."""
    d = Path(run_dir)
    if not d.exists():
        raise TraceError(d, "no such directory")
    if not d.is_dir():
        raise TraceError(
            d, "is a file, expected a run directory holding one trace per rank"
        )
    traces = run_traces(d)
    if not traces:
        raise TraceError(d, "holds no trace files (*.json, *.json.gz, *.sqlite)")
    return traces


def summarize_run(
    run_dir: str | Path,
    executor: Executor | str | None = None,
    cache: bool | str | Path = True,
) -> list[RankSummary]:
    """Summaries of every rank of ``run_dir``, in rank order.

    Two files claiming the same rank are an error: the cross-rank figures
    would silently count that rank twice.
    """
    traces = rank_traces(run_dir)
    ex = (
        executor
        if executor is not None and not isinstance(executor, str)
        else executor_for(executor)
    )
    cache_dir = (
        None
        if cache is False
        else str(default_cache_dir() if cache is True else Path(cache))
    )
    jobs = [RankJob(str(t.path.resolve()), t.rank, cache_dir) for t in traces]
    summaries = ex.map(summarize_file, jobs)
    seen: dict[int, str] = {}
    for s in summaries:
        if s.rank in seen:
            raise TraceError(
                run_dir,
                f"rank {s.rank} appears twice ({Path(seen[s.rank]).name}, {Path(s.path).name})",
            )
        seen[s.rank] = s.path
    return sorted(summaries, key=lambda s: s.rank)
