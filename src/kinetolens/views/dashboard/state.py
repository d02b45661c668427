"""Which traces the dashboard knows, which are loaded, and loading them in the background.

Requests never wait on a load: asking for a trace that is not in memory yet
queues its load on a small thread pool and answers at once with its status
(``queued``, ``loading`` with the seconds spent, ``error`` with the one-line
:class:`~kinetolens.errors.TraceError`), so the page can show progress and a
large trace loading never holds up requests for others.  Loaded traces sit
in a small LRU; each keeps a memo of the analysis results computed for it,
so a table that is sorted, filtered and paged is computed once.

Runs and workers are looked up by name in the list :func:`find_runs`
discovered; a name from a request is never joined into a path, so no
request can reach a file outside the logdir.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kinetolens.errors import TraceError
from kinetolens.loader import load
from kinetolens.logdir import WorkerTrace, find_runs
from kinetolens.model.trace import Trace

T = TypeVar("T")


class UnknownTrace(LookupError):
    """A run or worker name that is not among the discovered traces."""


def worker_id(w: WorkerTrace) -> str:
    """A worker's name in URLs: its file name, unique inside its run directory."""
    return w.path.name


@dataclass
class Loaded:
    """A loaded trace and the analysis results computed for it so far."""

    trace: Trace
    _memo: dict[Any, Future[Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def memo(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()`` once per key, even when requests ask for it at the same time."""
        with self._lock:
            fut = self._memo.get(key)
            owner = fut is None
            if owner:
                fut = self._memo[key] = Future()
        assert fut is not None
        if owner:
            try:
                fut.set_result(compute())
            except BaseException as exc:  # noqa: BLE001 - handed to every waiter
                fut.set_exception(exc)
        return fut.result()


@dataclass
class _Job:
    state: str  # queued | loading | ready | error
    queued_at: float
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None


def _file_key(path: Path) -> tuple[str, int, int]:
    """A trace is the same trace while its path, size and mtime stay the same."""
    try:
        st = path.stat()
    except OSError:
        return (str(path), -1, -1)
    return (str(path), st.st_size, st.st_mtime_ns)


class TraceStore:
    """The logdir's traces, loaded on demand in the background, the recent ones kept."""

    def __init__(self, logdir: str | Path, *, cache: bool = True, keep: int = 6, loaders: int = 2) -> None:
        self.logdir = Path(logdir)
        self.cache = cache
        self.keep = keep
        self._pool = ThreadPoolExecutor(max_workers=loaders, thread_name_prefix="kinetolens-load")
        self._lock = threading.Lock()
        self._runs: dict[str, list[WorkerTrace]] = {}
        self._jobs: dict[tuple[str, int, int], _Job] = {}
        self._loaded: OrderedDict[tuple[str, int, int], Loaded] = OrderedDict()

    # -- discovery -----------------------------------------------------
    def runs(self) -> dict[str, list[WorkerTrace]]:
        """List the logdir again, so runs written since the last call appear."""
        found = find_runs(self.logdir)
        with self._lock:
            self._runs = found
        return found

    def lookup(self, run: str, worker: str) -> WorkerTrace:
        """The discovered trace named (run, worker); :class:`UnknownTrace` otherwise."""
        for attempt in range(2):
            with self._lock:
                traces = self._runs.get(run)
            if traces is not None:
                for w in traces:
                    if worker_id(w) == worker:
                        return w
            if attempt == 0:
                self.runs()
        raise UnknownTrace(f"no trace {worker!r} in run {run!r}")

    def run_workers(self, run: str) -> list[WorkerTrace]:
        with self._lock:
            traces = self._runs.get(run)
        if traces is None:
            traces = self.runs().get(run)
        if traces is None:
            raise UnknownTrace(f"no run {run!r}")
        return traces

    # -- loading -------------------------------------------------------
    def status(self, w: WorkerTrace) -> dict[str, Any]:
        """Where the trace's load stands, without starting one."""
        key = _file_key(w.path)
        with self._lock:
            job = self._jobs.get(key)
            if key in self._loaded:
                return {"state": "ready"}
        if job is None:
            return {"state": "idle"}
        now = time.monotonic()
        out: dict[str, Any] = {"state": job.state}
        if job.state == "queued":
            out["waited_s"] = round(now - job.queued_at, 2)
        elif job.state == "loading" and job.started_at is not None:
            out["elapsed_s"] = round(now - job.started_at, 2)
            out["bytes"] = key[1]
        elif job.state == "error":
            out["error"] = job.error
        elif job.state == "ready":
            out["state"] = "idle"  # loaded once, since dropped from the LRU
        return out

    def get(self, w: WorkerTrace) -> Loaded | None:
        """The loaded trace, or None after making sure its load is under way."""
        key = _file_key(w.path)
        with self._lock:
            hit = self._loaded.get(key)
            if hit is not None:
                self._loaded.move_to_end(key)
                return hit
            job = self._jobs.get(key)
            if job is not None and job.state in ("queued", "loading", "error"):
                return None
            self._jobs[key] = _Job("queued", time.monotonic())
        self._pool.submit(self._load, key, w.path)
        return None

    def _load(self, key: tuple[str, int, int], path: Path) -> None:
        with self._lock:
            job = self._jobs[key]
            job.state, job.started_at = "loading", time.monotonic()
        try:
            trace = load(path, cache=self.cache)
        except TraceError as exc:
            self._finish(key, error=str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - any failure is this trace's, not the server's
            message = " ".join(f"{type(exc).__name__}: {exc}".split())
            self._finish(key, error=f"{path}: cannot load: {message}")
            return
        self._finish(key, loaded=Loaded(trace))

    def _finish(self, key: tuple[str, int, int], *, loaded: Loaded | None = None, error: str | None = None) -> None:
        with self._lock:
            job = self._jobs[key]
            job.finished_at = time.monotonic()
            if loaded is None:
                job.state, job.error = "error", error
                return
            job.state = "ready"
            self._loaded[key] = loaded
            while len(self._loaded) > self.keep:
                self._loaded.popitem(last=False)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
