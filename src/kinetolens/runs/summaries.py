"""Per-rank summaries of a run directory, computed by an executor.

Each rank's trace is loaded with the normal :func:`kinetolens.load` cache
(Arrow IPC, keyed by file), summarized, and only the small
:class:`~kinetolens.analysis.ranks.distributed.RankSummary` comes back.  The
cross-rank analyses then run on the list of summaries in this process.
The run and the cache may be fsspec URLs (:mod:`kinetolens.runs.storage`).

A folder that several runs wrote into (a script run twice with the same run
name, or several profiling windows of one job) holds more than one trace per
rank.  Each rank's newest trace is used (by the millisecond stamp in its
name, else the file's modification time) and the choice is reported in
``notes``: comparing rank 0 of one run with rank 1 of another, or counting a
rank twice, would make every cross-rank figure wrong.  A folder holding no
traces of its own but a ``latest`` pointer (``kinetolens run`` makes one per
run name) stands for the run it points to.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kinetolens.analysis.ranks.distributed import RankSummary, rank_summary
from kinetolens.cache import default_cache_location, is_url
from kinetolens.errors import TraceError
from kinetolens.formats import LATEST_RUN
from kinetolens.logdir import WorkerTrace, newest_per_rank, run_traces, trace_age
from kinetolens.model.processes import gpu_processes, process_view
from kinetolens.model.trace import Trace
from kinetolens.runs.executors import Executor, executor_for
from kinetolens.runs.storage import RemoteTrace, load_source, remote_rank_traces

R = TypeVar("R")


@dataclass(frozen=True)
class RankJob:
    """One rank's work, as sent to a worker (plain strings: picklable anywhere)."""

    path: str
    rank: int | None
    cache: str | None
    #: Bytes of the trace, known from the listing (sizes the local pool
    #: without a request per object); None: read it from the file.
    size: int | None = None
    #: The host process that is this rank, in a file that holds several (an
    #: Nsight Systems report of a multi-process job); None: the whole file.
    process: int | None = None
    #: Read the trace a step window at a time (True), whole (False), or by
    #: its size (None: :mod:`kinetolens.runs.window_choice`).
    windows: bool | None = None
    #: The memory the local pool plans for this rank: a step window's where
    #: the work reads it a step window at a time; None: as its size says.
    peak_bytes: int | None = None


def load_rank(job: RankJob) -> Trace:
    """The job's trace (through the cache), cut to its process where the file holds several."""
    trace = load_source(job.path, job.cache)
    return trace if job.process is None else process_view(trace, job.process)


@dataclass(frozen=True)
class RankFailure:
    """A rank whose trace could not be analysed: its file and the one-line reason."""

    path: str
    problem: str


@dataclass(frozen=True)
class _Guarded:
    """``fn`` with a rank's bad input returned, not raised, so the other ranks still count (picklable)."""

    fn: Callable[[RankJob], Any]

    def __call__(self, job: RankJob) -> Any:
        try:
            return self.fn(job)
        except TraceError as exc:
            return RankFailure(exc.path, exc.problem)


def summarize_file(job: RankJob) -> RankSummary:
    """Load one rank's trace (through the cache) and summarize it; a local
    Kineto trace too large to hold (or any, with ``job.windows``) is read a
    step window at a time instead, where it has steps (its summary is then
    not cached: the next run reads the file again)."""
    if job.process is None and not is_url(job.path):
        from kinetolens.runs.window_choice import reads_in_windows

        if reads_in_windows(Path(job.path), job.windows):
            from kinetolens.runs.windowed_read import rank_summary_in_windows

            summary = rank_summary_in_windows(Path(job.path), job.rank)
            if summary is not None:
                return summary
    return rank_summary(load_rank(job), job.rank)


def rank_traces(
    run_dir: str | Path, notes: list[str] | None = None
) -> list[WorkerTrace] | list[RemoteTrace]:
    """The run's traces; a clear error for an empty or missing directory.
    A directory with no traces but a ``latest`` pointer is the run it points
    to (said in ``notes``)."""
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
    latest = d / LATEST_RUN
    if not traces and latest.is_dir():
        traces = run_traces(latest.resolve())
        if traces and notes is not None:
            notes.append(f"{d}: using its latest run, {latest.resolve().name}")
    if not traces:
        raise TraceError(d, "holds no trace files (*.json, *.json.gz, *.sqlite)")
    return traces


RunTrace = WorkerTrace | RemoteTrace


def _name(t: RunTrace) -> str:
    return t.path.name if isinstance(t, WorkerTrace) else posixpath.basename(t.url)


def summarize_run(
    run_dir: str | Path,
    executor: Executor | str | None = None,
    cache: bool | str | Path = True,
    notes: list[str] | None = None,
    strict: bool = False,
    windows: bool | None = None,
) -> list[RankSummary]:
    """Summaries of every rank of ``run_dir`` (a directory or an fsspec URL),
    in rank order.  ``cache``: True for ``$KINETOLENS_CACHE_DIR`` or the
    default, False for none, else a directory or an fsspec URL.

    One trace per rank: where several files are of one rank (by name, or,
    once loaded, by the rank they record) the newest is used, and a line
    saying so is appended to ``notes``; so is a rank whose trace is bad
    input, left out (unless ``strict``: then its error is raised).
    ``windows``: read each rank's trace a step window at a time (True),
    whole (False), or by its size (None; :func:`summarize_file`).
    """
    return map_ranks(run_dir, summarize_file, executor, cache, notes, strict, windows, windowed_reads=True)


def map_ranks(
    run_dir: str | Path,
    fn: Callable[[RankJob], R],
    executor: Executor | str | None = None,
    cache: bool | str | Path = True,
    notes: list[str] | None = None,
    strict: bool = False,
    windows: bool | None = None,
    windowed_reads: bool = False,
) -> list[R]:
    """``fn`` (a picklable function of a :class:`RankJob` returning something
    with a ``rank``) over the newest trace of each rank of ``run_dir``, on
    the executor, in rank order (see :func:`summarize_run`).

    A rank whose trace is bad input is left out and named in ``notes`` with
    its error, so one corrupt file of N does not stop the other N-1; with
    ``strict`` (or when no rank is left) its error is raised instead.
    ``windowed_reads``: ``fn`` reads a trace too large to hold a step window
    at a time (:func:`summarize_file`), so the local pool plans such a rank
    at a window's memory, not its size's, and runs more of them at once."""
    traces, left_out = newest_per_rank(rank_traces(run_dir, notes))
    where = cache_location(cache)
    jobs = [_job(t, where, windows, windowed_reads) for t in traces]
    if len(jobs) == 1:
        traces, jobs = _processes_as_ranks(traces[0], jobs[0], notes)
    ex = (
        executor
        if executor is not None and not isinstance(executor, str)
        else executor_for(executor)
    )
    results = ex.map(_Guarded(fn), jobs)
    failed = [r for r in results if isinstance(r, RankFailure)]
    if failed and (strict or len(failed) == len(results)):
        raise TraceError(failed[0].path, failed[0].problem)
    if notes is not None:
        notes += [f"{f.path}: {f.problem} (this rank is left out of every figure; --strict stops instead)" for f in failed]
    kept = [(s, t) for s, t in zip(results, traces, strict=True) if not isinstance(s, RankFailure)]
    summaries = [s for s, _ in kept]
    traces = [t for _, t in kept]
    newest: dict[int, tuple[R, RunTrace]] = {}
    for s, t in zip(summaries, traces, strict=True):
        if s.rank not in newest or trace_age(t) > trace_age(newest[s.rank][1]):
            newest[s.rank] = (s, t)
    older = [(t.rank, t) for t in left_out] + [
        (s.rank, t) for s, t in zip(summaries, traces, strict=True) if newest[s.rank][0] is not s
    ]
    if older and notes is not None:
        notes.append(_left_out_note(run_dir, newest, older))
    return [s for s, _ in sorted(newest.values(), key=lambda st: st[0].rank)]


def _left_out_note(
    run_dir: str | Path,
    newest: dict[int, tuple[Any, RunTrace]],
    older: list[tuple[int | None, RunTrace]],
) -> str:
    """One line: which ranks had several traces, the newest kept for the
    first of them, and the older ones left out."""
    ranks = sorted({r for r, _ in older if r is not None})
    shown = ", ".join(str(r) for r in ranks[:8]) + (", ..." if len(ranks) > 8 else "")
    names = sorted(_name(t) for _, t in older)
    kept = f" (rank {ranks[0]}: {_name(newest[ranks[0]][1])})" if ranks and ranks[0] in newest else ""
    return (
        f"{run_dir}: more than one trace of rank {shown} (several runs or profiling windows in one "
        f"folder); using each rank's newest{kept} and leaving out {len(older)} older: "
        f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''}"
    )


def cache_location(cache: bool | str | Path) -> str | None:
    """Where the per-rank caches go: None (no cache), a local directory or a URL."""
    if cache is False:
        return None
    where = default_cache_location() if cache is True else cache
    # absolute before it travels: a Dask worker would read a relative one against its own directory
    return where if is_url(where) else str(Path(where).expanduser().resolve())


def _processes_as_ranks(
    trace: RunTrace, job: RankJob, notes: list[str] | None
) -> tuple[list[RunTrace], list[RankJob]]:
    """A run of one Nsight Systems report whose processes each launched GPU
    work (``nsys profile torchrun ...``): one rank per process, in pid order
    (:mod:`kinetolens.model.processes`).  Any other run: itself."""
    if isinstance(trace, RemoteTrace) or trace.path.suffix != ".sqlite":
        return [trace], [job]
    try:
        pids = gpu_processes(load_rank(job))
    except TraceError:
        return [trace], [job]  # the worker reports it, as for any rank
    if len(pids) < 2:
        return [trace], [job]
    if notes is not None:
        notes.append(f"{trace.path.name}: {len(pids)} processes launched GPU work (pids {', '.join(map(str, pids))}): each is a rank")
    traces: list[RunTrace] = [dataclasses.replace(trace, rank=i) for i in range(len(pids))]
    return traces, [dataclasses.replace(job, rank=i, process=pid) for i, pid in enumerate(pids)]


def _job(t: WorkerTrace | RemoteTrace, cache: str | None, windows: bool | None = None, windowed_reads: bool = False) -> RankJob:
    if isinstance(t, RemoteTrace):
        return RankJob(t.url, t.rank, cache, t.size)
    path = t.path.resolve()
    peak = None
    if windowed_reads:
        from kinetolens.runs.window_choice import WINDOWED_PEAK_BYTES, reads_in_windows

        peak = WINDOWED_PEAK_BYTES if reads_in_windows(path, windows) else None
    return RankJob(str(path), t.rank, cache, windows=windows, peak_bytes=peak)
