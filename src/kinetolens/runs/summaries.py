"""Per-rank summaries of a run directory, computed by an executor.

Each rank's trace is loaded with the normal :func:`kinetolens.load` cache
(Parquet, keyed by file), summarized, and only the small
:class:`~kinetolens.analysis.distributed.RankSummary` comes back.  The
cross-rank analyses then run on the list of summaries in this process.
The run and the cache may be fsspec URLs (:mod:`kinetolens.runs.storage`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kinetolens.analysis.distributed import RankSummary, rank_summary
from kinetolens.cache import default_cache_location, is_url
from kinetolens.errors import TraceError
from kinetolens.logdir import WorkerTrace, run_traces
from kinetolens.runs.executors import Executor, executor_for
from kinetolens.runs.storage import RemoteTrace, load_source, remote_rank_traces


@dataclass(frozen=True)
class RankJob:
    """One rank's work, as sent to a worker (plain strings: picklable anywhere)."""

    path: str
    rank: int | None
    cache: str | None
    #: Bytes of the trace, known from the listing (sizes the local pool
    #: without a request per object); None: read it from the file.
    size: int | None = None


def summarize_file(job: RankJob) -> RankSummary:
    """Load one rank's trace (through the cache) and summarize it."""
    return rank_summary(load_source(job.path, job.cache), job.rank)


def rank_traces(run_dir: str | Path) -> list[WorkerTrace] | list[RemoteTrace]:
    """The run's traces, one per rank; a clear error for an empty or missing directory."""
    if is_url(run_dir):
        return remote_rank_traces(str(run_dir))
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
    """Summaries of every rank of ``run_dir`` (a directory or an fsspec URL),
    in rank order.  ``cache``: True for ``$KINETOLENS_CACHE_DIR`` or the
    default, False for none, else a directory or an fsspec URL.

    Two files claiming the same rank are an error: the cross-rank figures
    would silently count that rank twice.
    """
    traces = rank_traces(run_dir)
    ex = (
        executor
        if executor is not None and not isinstance(executor, str)
        else executor_for(executor)
    )
    where = cache_location(cache)
    jobs = [_job(t, where) for t in traces]
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


def cache_location(cache: bool | str | Path) -> str | None:
    """Where the per-rank caches go: None (no cache), a local directory or a URL."""
    if cache is False:
        return None
    where = default_cache_location() if cache is True else cache
    # absolute before it travels: a Dask worker would read a relative one against its own directory
    return where if is_url(where) else str(Path(where).expanduser().resolve())


def _job(t: WorkerTrace | RemoteTrace, cache: str | None) -> RankJob:
    if isinstance(t, RemoteTrace):
        return RankJob(t.url, t.rank, cache, t.size)
    return RankJob(str(t.path.resolve()), t.rank, cache)
