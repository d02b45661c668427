"""Which traces the dashboard knows, which are loaded, and loading them in the background.

Requests never wait on a load: asking for a trace that is not in memory yet
queues its load on a small thread pool and answers at once with its status
(``queued``, ``loading`` with the seconds spent, ``error`` with the one-line
:class:`~kinetolens.errors.TraceError`), so the page can show progress and a
large trace loading never holds up requests for others.  Loaded traces sit
in a small LRU; each keeps a bounded memo of the tables and pictures made
for it (per step and parameters), so a table that is sorted, filtered and
paged is computed once.  The base analyses those tables read (op stats,
step breakdown, recommendations ...) are kept once per trace by its
analysis session (:mod:`kinetolens.analysis.session`), not here.

A view over a run's ranks never needs every rank's trace in memory at once:
each rank is loaded once and reduced to a small per-rank *digest* (the
summaries the cross-rank analyses read), which is kept for as long as the
file stays the same and in the logdir.  A run of 64 ranks thus needs 64
loads and 64 digests, however few whole traces the LRU keeps.

Runs and workers are looked up by name in the list :func:`find_runs`
discovered; a name from a request is never joined into a path, and a trace
whose resolved path is outside the logdir (a link pointing out of it) is
neither listed nor served, so no request can reach a file outside the
logdir.  A trace is known by its path, size, mtime and content fingerprint
(:mod:`kinetolens.fingerprint`): a rewrite that keeps size and mtime is a
new trace.  A trace whose file is gone answers "unknown" at once, and what
was kept for it is dropped.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kinetolens.errors import TraceError
from kinetolens.fingerprint import file_fingerprint
from kinetolens.loader import load
from kinetolens.logdir import WorkerTrace, find_runs
from kinetolens.model.trace import Trace

T = TypeVar("T")

#: Results kept per loaded trace (tables per step and parameters, pictures): the least recently used beyond this are dropped,
#: so dragging a memory range to ever new places cannot grow it without end.
MEMO_ENTRIES = 64
#: Encoded answers kept per loaded trace (a page's JSON, a table page): tens of kB each.
ANSWER_ENTRIES = 128


class UnknownTrace(LookupError):
    """A run or worker name that is not among the discovered traces."""


def worker_id(w: WorkerTrace) -> str:
    """A worker's name in URLs: its file name, unique inside its run directory."""
    return w.path.name


class OncePerKey:
    """Results computed once per key, even when requests ask for one at the same time;
    the ``entries`` most recently used are kept.  A computation that fails is
    handed to every request waiting on it and then forgotten, so the next
    request tries again."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._futures: OrderedDict[Any, Future[Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, compute: Callable[[], T]) -> T:
        with self._lock:
            fut = self._futures.get(key)
            owner = fut is None
            if owner:
                fut = self._futures[key] = Future()
                while len(self._futures) > self.entries:
                    self._futures.popitem(last=False)  # a waiter on it holds its own reference
            else:
                self._futures.move_to_end(key)
        assert fut is not None
        if owner:
            try:
                fut.set_result(compute())
            except BaseException as exc:  # noqa: BLE001 - handed to every waiter
                fut.set_exception(exc)
                with self._lock:
                    if self._futures.get(key) is fut:
                        del self._futures[key]
        return fut.result()  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self._futures)


@dataclass
class Loaded:
    """A loaded trace, the analysis results computed for it so far, and the
    answers (encoded JSON bodies) already sent for it: a trace never changes
    once loaded, so the same request gets the same bytes without building
    its blocks or sorting its table again."""

    trace: Trace
    _memo: OncePerKey = field(default_factory=lambda: OncePerKey(MEMO_ENTRIES))
    _answers: OncePerKey = field(default_factory=lambda: OncePerKey(ANSWER_ENTRIES))

    def memo(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()`` once per key; the :data:`MEMO_ENTRIES` most recently used results are kept."""
        return self._memo.get(key, compute)

    def answer(self, key: Any, encode: Callable[[], bytes]) -> bytes:
        """The body of a request's answer, encoded once per key (:data:`ANSWER_ENTRIES` kept)."""
        return self._answers.get(key, encode)


@dataclass
class _Job:
    state: str  # queued | loading | ready | error
    queued_at: float
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    #: Make the digest as soon as the trace is loaded (a run view waits on it),
    #: with this rank where the trace does not say.
    digest: bool = False
    rank: int | None = None


FileKey = tuple[str, int, int, str]


def file_key(path: Path) -> FileKey:
    """A trace is the same trace while its path, size, mtime and content
    fingerprint (its first and last MiB) stay the same."""
    try:
        st = path.stat()
        return (str(path), st.st_size, st.st_mtime_ns, file_fingerprint(path, st))
    except OSError:
        return (str(path), -1, -1, "")


def inside(path: Path, root: Path) -> bool:
    """Whether ``path``, links resolved, is ``root`` or under it."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


class TraceStore:
    """The logdir's traces, loaded on demand in the background, the recent ones kept."""

    def __init__(
        self,
        logdir: str | Path,
        *,
        cache: bool = True,
        keep: int = 6,
        loaders: int = 2,
        digest: Callable[[Trace, int | None], Any] | None = None,
    ) -> None:
        # A diff needs two traces in memory at once: with one, loading either evicts the other, forever.
        if keep < 2:
            raise ValueError(f"keep must be at least 2 loaded traces (a diff holds two), not {keep}")
        self.logdir = Path(logdir)
        self.cache = cache
        self.keep = keep
        self._digest_of = digest
        self._pool = ThreadPoolExecutor(max_workers=loaders, thread_name_prefix="kinetolens-load")
        self._lock = threading.Lock()
        self._runs: dict[str, list[WorkerTrace]] = {}
        self._jobs: dict[FileKey, _Job] = {}
        self._loaded: OrderedDict[FileKey, Loaded] = OrderedDict()
        self._digests: dict[FileKey, Future[Any]] = {}

    # -- discovery -----------------------------------------------------
    def runs(self) -> dict[str, list[WorkerTrace]]:
        """List the logdir again, so runs written since the last call appear.

        Load states and digests of files gone from the logdir, or rewritten
        since, are forgotten: what the store keeps is bounded by the logdir.
        """
        try:
            listed = find_runs(self.logdir)
        except TraceError:  # the logdir itself is gone: so are its runs
            with self._lock:
                self._runs = {}
                self._loaded.clear()
                self._digests.clear()
            raise
        found = {}
        for run, traces in listed.items():
            kept = [w for w in traces if inside(w.path, self.logdir)]  # no link out of the logdir
            if kept:
                found[run] = kept
        current = {file_key(w.path) for traces in found.values() for w in traces}
        with self._lock:
            self._runs = found
            for key in [k for k in self._digests if k not in current]:
                del self._digests[key]
            for key in [k for k in self._loaded if k not in current]:
                del self._loaded[key]  # its file is gone or rewritten: release its memory
            for key in [k for k, j in self._jobs.items() if k not in current and j.state not in ("queued", "loading")]:
                del self._jobs[key]  # (a load under way still reports to its job)
        return found

    def lookup(self, run: str, worker: str) -> WorkerTrace:
        """The discovered trace named (run, worker); :class:`UnknownTrace` otherwise."""
        for attempt in range(2):
            with self._lock:
                traces = self._runs.get(run)
            if traces is not None:
                for w in traces:
                    if worker_id(w) == worker:
                        self._check_servable(w)
                        return w
            if attempt == 0:
                self.runs()
        raise UnknownTrace(f"no trace {worker!r} in run {run!r}")

    def _check_servable(self, w: WorkerTrace) -> None:
        """:class:`UnknownTrace` for a trace whose file is gone (what was kept
        for it is dropped) or that now resolves outside the logdir."""
        if not os.path.lexists(w.path) or not w.path.exists():
            self._forget(str(w.path))
            raise UnknownTrace(f"trace {worker_id(w)!r} of run {w.run!r} is gone from the logdir")
        if not inside(w.path, self.logdir):
            self._forget(str(w.path))
            raise UnknownTrace(f"no trace {worker_id(w)!r} in run {w.run!r}")

    def _forget(self, path: str) -> None:
        """Drop the loaded trace, digest and finished load states of ``path``."""
        with self._lock:
            for key in [k for k in self._loaded if k[0] == path]:
                del self._loaded[key]
            for key in [k for k in self._digests if k[0] == path]:
                del self._digests[key]
            for key in [k for k, j in self._jobs.items() if k[0] == path and j.state not in ("queued", "loading")]:
                del self._jobs[key]

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
        key = file_key(w.path)
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
        key = file_key(w.path)
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

    def digest(self, w: WorkerTrace, rank: int | None = None) -> Any | None:
        """The trace's digest (the ``digest`` function given to the store, on
        the loaded trace and ``rank``, its rank where the trace does not say),
        or None after making sure it is under way.  A failed load raises
        nothing here: :meth:`status` says ``error``.  A digest that raised
        raises again, on every call, as the request's own failure."""
        if self._digest_of is None:
            raise RuntimeError("this store was made without a digest function")
        key = file_key(w.path)
        with self._lock:
            done = self._digests.get(key)
            loaded = self._loaded.get(key) if done is None else None
            if done is None and loaded is None:
                job = self._jobs.get(key)
                if job is not None and job.state in ("queued", "loading"):
                    job.digest, job.rank = True, rank
                    return None
                if job is not None and job.state == "error":
                    return None
                self._jobs[key] = _Job("queued", time.monotonic(), digest=True, rank=rank)
        if done is not None:
            return done.result()
        if loaded is not None:
            return self._make_digest(key, loaded, rank).result()
        self._pool.submit(self._load, key, w.path)
        return None

    def _make_digest(self, key: FileKey, loaded: Loaded, rank: int | None) -> Future[Any]:
        fut: Future[Any] = Future()
        try:
            assert self._digest_of is not None
            fut.set_result(loaded.memo(("digest", rank), lambda: self._digest_of(loaded.trace, rank)))  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - kept, and raised to whoever asks for it
            fut.set_exception(exc)
        with self._lock:
            return self._digests.setdefault(key, fut)

    def _load(self, key: FileKey, path: Path) -> None:
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
        loaded = Loaded(trace)
        with self._lock:
            wanted, rank = job.digest and self._digest_of is not None, job.rank
        if wanted:
            # here, before the LRU may drop the trace again: a run of more
            # ranks than `keep` would otherwise reload its ranks forever
            self._make_digest(key, loaded, rank)
        self._finish(key, loaded=loaded)

    def _finish(self, key: FileKey, *, loaded: Loaded | None = None, error: str | None = None) -> None:
        same = loaded is None or file_key(Path(key[0])) == key
        with self._lock:
            job = self._jobs.get(key)
            if job is None:  # forgotten meanwhile: the file changed or went away
                return
            job.finished_at = time.monotonic()
            if loaded is None:
                job.state, job.error = "error", error
                return
            job.state = "ready"
            if not same:  # the file went away or changed while it loaded: keep nothing of it
                self._digests.pop(key, None)
                return
            self._loaded[key] = loaded
            while len(self._loaded) > self.keep:
                self._loaded.popitem(last=False)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
