"""Finding traces on disk: a logdir holds runs, a run holds one trace per worker.

The layout is torch-tb-profiler's (``LOGDIR/RUN/WORKER[.SPAN].pt.trace.json[.gz]``),
so an existing TensorBoard profiler logdir works as it is.  A run directory may
also hold traces under other names (``rank-0.json.gz``, Nsight ``.sqlite``
exports), as traces collected by hand or by other tools often are: every
``.json``, ``.json.gz`` and ``.sqlite`` file counts, except kinetolens' own run
metadata (``*.kinetolens.json``).

The rank of a worker is read from its name (``..._rank3``, ``rank-3``,
``rank3``) because discovery must not open the files: a logdir of a thousand
ranks is listed before any of them is loaded.  The loaded trace's own
``distributedInfo`` remains the authority for analyses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from kinetolens.errors import TraceError
from kinetolens.formats import CAPTURE_DETAILS, CAPTURE_DIR, LATEST_RUN, METADATA_SUFFIX


class _Named(Protocol):
    """A trace record as listed: a local :class:`WorkerTrace` or one at a URL."""

    @property
    def span(self) -> str | None: ...
    @property
    def rank(self) -> int | None: ...


T = TypeVar("T", bound=_Named)

TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".sqlite")
_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
# tb-profiler names a trace WORKER.SPAN.pt.trace.json, SPAN a millisecond stamp.
_SPAN = re.compile(r"^(?P<worker>.+)\.(?P<span>\d+)$")


@dataclass(frozen=True)
class WorkerTrace:
    """One trace file of a run: which worker (and rank) wrote it, and when."""

    run: str
    worker: str
    span: str | None
    rank: int | None
    path: Path


def trace_suffix(path: Path) -> str | None:
    """The trace suffix ``path`` ends with, or None if it is not a trace file."""
    name = path.name
    if name.endswith(METADATA_SUFFIX) or name.startswith(".") or name == CAPTURE_DETAILS:
        return None
    for suffix in TRACE_SUFFIXES:
        if name.endswith(suffix):
            return suffix
    return None


def parse_trace_name(name: str) -> tuple[str, str | None, int | None] | None:
    """``(worker, span, rank)`` read from a trace's file name, or None if the
    name is not a trace's.  Names only, no file access: remote listings
    (:mod:`kinetolens.runs.storage`) describe their objects with it too."""
    suffix = trace_suffix(Path(name))
    if suffix is None:
        return None
    stem = name[: -len(suffix)]
    span = None
    m = _SPAN.match(stem)
    if m is not None:
        stem, span = m.group("worker"), m.group("span")
    ranks = _RANK.findall(stem)
    return stem, span, int(ranks[-1]) if ranks else None


def worker_trace(path: Path, run: str) -> WorkerTrace | None:
    """Describe one file of a run, or None if it is not a trace."""
    parsed = parse_trace_name(path.name)
    if parsed is None or not path.is_file():
        return None
    worker, span, rank = parsed
    return WorkerTrace(run=run, worker=worker, span=span, rank=rank, path=path)


def trace_order(t: WorkerTrace) -> tuple[int, int, str, str]:
    """Sort key of a run's traces: by rank (unranked last), worker, span."""
    return (t.rank is None, t.rank if t.rank is not None else 0, t.worker, t.span or "")


def trace_age(t: _Named) -> tuple[int, int, str]:
    """Sort key, oldest first: the millisecond stamp of the name, else the
    file's modification time, else the name.  Takes any trace record with
    ``span`` and ``path`` (or ``url``, for traces at a URL: no mtime there)."""
    stamp = int(t.span) if t.span is not None and t.span.isdigit() else -1
    path = getattr(t, "path", None)
    try:
        mtime = path.stat().st_mtime_ns if isinstance(path, Path) else 0
    except OSError:
        mtime = 0
    return (stamp, mtime, path.name if isinstance(path, Path) else str(getattr(t, "url", "")))


def newest_per_rank(traces: Sequence[T]) -> tuple[list[T], list[T]]:
    """``(kept, left_out)``: each rank's newest trace (:func:`trace_age`) and
    the older ones, where a folder holds several traces of a rank (two runs
    written into one folder, several profiling windows).  Traces whose name
    gives no rank are all kept."""
    by_rank: dict[int, list[T]] = {}
    kept: list[T] = []
    for t in traces:
        if t.rank is None:
            kept.append(t)
        else:
            by_rank.setdefault(t.rank, []).append(t)
    left_out: list[T] = []
    for group in by_rank.values():
        group = sorted(group, key=trace_age)
        kept.append(group[-1])
        left_out += group[:-1]
    return sorted(kept, key=trace_order), left_out  # type: ignore[arg-type]


def run_traces(run_dir: str | Path, run: str | None = None) -> list[WorkerTrace]:
    """The traces directly inside ``run_dir``, ordered by rank, then worker and span."""
    d = Path(run_dir)
    name = run if run is not None else d.name
    found = [w for p in d.iterdir() if (w := worker_trace(p, name)) is not None]
    return sorted(found, key=trace_order)


def is_capture_folder(d: Path) -> bool:
    """A graph replay's ``capture_traces/`` folder (it holds ``execution_details.json``)."""
    return d.name == CAPTURE_DIR and (d / CAPTURE_DETAILS).is_file()


def find_runs(logdir: str | Path) -> dict[str, list[WorkerTrace]]:
    """Every run under ``logdir``: directories (at any depth) holding traces.

    A run is named by its path relative to ``logdir`` (``"."`` for traces
    directly in it).  Hidden directories are skipped, and so are run
    directories removed while they are listed (a logdir being written to or
    cleaned up while ``serve`` lists it), and links (the ``latest`` link of
    ``kinetolens run`` is a second name for a run).  A missing ``logdir`` is
    a :class:`TraceError`.
    """
    root = Path(logdir)
    if not root.is_dir():
        raise TraceError(root, "no such directory" if not root.exists() else "is not a directory")
    runs: dict[str, list[WorkerTrace]] = {}
    for d in sorted([root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]):
        rel = d.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or is_capture_folder(d):
            continue  # hidden, or the capture traces of the replay run above it
        name = rel.as_posix()
        try:
            traces = run_traces(d, name)
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone since rglob saw it
        if traces:
            runs[name] = traces
    return runs


def one_run(path: str | Path) -> list[WorkerTrace]:
    """The traces of the one run a directory stands for.

    A run directory is itself; a logdir holding exactly one run is that run;
    a folder of runs with a ``latest`` link (``kinetolens run``'s
    ``LOGDIR/NAME``) is the run it points to; a logdir of several runs is
    otherwise ambiguous and an error, as is a directory without traces.
    A run is one trace per rank: where a folder holds several traces of a
    rank, the newest (:func:`newest_per_rank`).  Commands that take "a trace or a run" resolve
    directories through this, so they agree on what a directory means.
    """
    p = Path(path)
    if not p.is_dir():
        raise TraceError(p, "no such directory" if not p.exists() else "is not a directory")
    latest = p / LATEST_RUN
    traces = run_traces(p) or (run_traces(latest.resolve()) if latest.is_dir() else [])
    if traces:
        return newest_per_rank(traces)[0]
    runs = find_runs(p)
    if not runs:
        raise TraceError(p, "directory holds no traces (.json, .json.gz, .sqlite)")
    if len(runs) > 1:
        names = ", ".join(sorted(runs)[:5]) + (", ..." if len(runs) > 5 else "")
        raise TraceError(p, f"directory holds {len(runs)} runs ({names}); give one run directory")
    return newest_per_rank(next(iter(runs.values())))[0]
