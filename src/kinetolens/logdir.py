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
from dataclasses import dataclass
from pathlib import Path

from kinetolens.errors import TraceError
from kinetolens.formats import LATEST_RUN, METADATA_SUFFIX

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
    if name.endswith(METADATA_SUFFIX) or name.startswith("."):
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


def run_traces(run_dir: str | Path, run: str | None = None) -> list[WorkerTrace]:
    """The traces directly inside ``run_dir``, ordered by rank, then worker and span."""
    d = Path(run_dir)
    name = run if run is not None else d.name
    found = [w for p in d.iterdir() if (w := worker_trace(p, name)) is not None]
    return sorted(found, key=trace_order)


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
        if any(part.startswith(".") for part in rel.parts):
            continue
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
    otherwise ambiguous and an error, as is a directory without traces.  Commands that take "a trace or a run" resolve
    directories through this, so they agree on what a directory means.
    """
    p = Path(path)
    if not p.is_dir():
        raise TraceError(p, "no such directory" if not p.exists() else "is not a directory")
    latest = p / LATEST_RUN
    traces = run_traces(p) or (run_traces(latest.resolve()) if latest.is_dir() else [])
    if traces:
        return traces
    runs = find_runs(p)
    if not runs:
        raise TraceError(p, "directory holds no traces (.json, .json.gz, .sqlite)")
    if len(runs) > 1:
        names = ", ".join(sorted(runs)[:5]) + (", ..." if len(runs) > 5 else "")
        raise TraceError(p, f"directory holds {len(runs)} runs ({names}); give one run directory")
    return next(iter(runs.values()))
