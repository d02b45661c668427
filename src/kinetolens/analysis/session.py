"""One analysis session per trace: each base result computed once, shared by every analysis.

A report reads the same base results from many places (the op table, the
roofline, the kernels table and the rules all need every op's FLOPs and
bytes; several need the kernels' Tensor Core verdicts).  Each is a pure
function of the trace, so it is computed once per trace and kept in the
trace's :class:`Session`:

* :func:`session_of` gives a trace's session.  Sessions live in a map keyed
  by the trace's identity and dropped when the trace is collected
  (``weakref.finalize``): a :class:`~kinetolens.model.trace.Trace` is an
  unhashable dataclass, and nothing is written into it.
* :func:`per_trace` marks a base analysis ``f(trace, *args)``: calling it
  returns the session's result for ``(f, args)``, computing it on the first
  call only (concurrent callers, the dashboard's threads, wait for that one).
  The decorated functions live in the folders that define them; this module
  imports none of them, which is why it comes first in the analysis folders'
  order (``tests/test_architecture.py``) and every folder may use it.
* :meth:`Session.derived` keeps a trace made from this one (the trace
  without a step cut short), so every analysis of "the whole steps" reads the
  same object, and with it the same session.
* :attr:`Session.warnings`: what analyses found wrong while computing (a FLOP
  formula that failed), kept here instead of in the trace they read; views
  list :func:`warnings_of` (the reader's warnings and these).

A cached result must not hold its trace (the session would keep it alive):
results are tables and small values, and a derived trace that *is* its
source is not stored.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from kinetolens.model.trace import TABLES

if TYPE_CHECKING:
    from kinetolens.errors import TraceWarning
    from kinetolens.model.trace import Trace

P = ParamSpec("P")
R = TypeVar("R")

_SAME = object()  # a derived trace that is its source


class Session:
    """The base results of one trace, each computed once (thread-safe)."""

    def __init__(
        self, trace: Trace, warnings: list[TraceWarning] | None = None
    ) -> None:
        #: The tables its results were computed from: a trace whose tables were
        #: replaced since (a test, a loader step) gets a fresh session.
        self.tables = _tables(trace)
        self._results: dict[Hashable, Future[Any]] = {}
        self._lock = threading.Lock()
        #: Warnings the analyses of this trace raised (shared with its derived traces).
        self.warnings: list[TraceWarning] = [] if warnings is None else warnings

    def get(self, fn: Callable[..., R], trace: Trace, *args: Any, **kwargs: Any) -> R:
        """``fn(trace, *args, **kwargs)``, computed once per function and arguments."""
        key = (fn, args, tuple(sorted(kwargs.items())))
        with self._lock:
            fut = self._results.get(key)
            owner = fut is None
            if owner:
                fut = self._results[key] = Future()
        assert fut is not None
        if owner:
            try:
                fut.set_result(fn(trace, *args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to every waiter, then forgotten
                with self._lock:
                    self._results.pop(key, None)
                fut.set_exception(exc)
        return fut.result()

    def derived(self, fn: Callable[[Trace], Trace], trace: Trace) -> Trace:
        """``fn(trace)``, a trace made from ``trace`` (steps dropped, say), made
        once; its session shares this one's warnings."""
        made = self.get(_derive, trace, fn)
        if made is _SAME:
            return trace
        return made

    def warn(self, warning: TraceWarning) -> None:
        """Record ``warning`` once."""
        with self._lock:
            if warning not in self.warnings:
                self.warnings.append(warning)


def _derive(trace: Trace, fn: Callable[[Trace], Trace]) -> Any:
    made = fn(trace)
    if made is trace:
        return _SAME
    _new_session(made, session_of(trace).warnings)
    return made


_SESSIONS: dict[int, Session] = {}
_SESSIONS_LOCK = threading.Lock()


def _drop(key: int) -> None:
    # A finalizer: the garbage collector may run it while this thread holds
    # the lock (inside _new_session), so it takes none (a dict pop is atomic).
    _SESSIONS.pop(key, None)


def _tables(trace: Trace) -> tuple[Any, ...]:
    return tuple(getattr(trace, name) for name in TABLES)


def _new_session(trace: Trace, warnings: list[TraceWarning] | None = None) -> Session:
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(id(trace))
        if session is not None and not _same(session.tables, _tables(trace)):
            session = _SESSIONS[id(trace)] = Session(
                trace, session.warnings if warnings is None else warnings
            )
        elif session is None:
            session = _SESSIONS[id(trace)] = Session(trace, warnings)
            weakref.finalize(trace, _drop, id(trace))
        return session


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return all(x is y for x, y in zip(a, b, strict=True))


def session_of(trace: Trace) -> Session:
    """The analysis session of ``trace`` (made on first use, dropped with the
    trace, made afresh when its tables were replaced)."""
    session = _SESSIONS.get(id(trace))
    if session is not None and _same(session.tables, _tables(trace)):
        return session
    return _new_session(trace)


def per_trace(fn: Callable[P, R]) -> Callable[P, R]:
    """Make the base analysis ``fn(trace, ...)`` computed once per trace and
    arguments, in the trace's session (arguments must be hashable)."""

    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def cached(trace: Trace, *args: Any, **kwargs: Any) -> R:
        # Defaults filled in: ``f(t)`` and ``f(t, by="op")`` are one result.
        bound = signature.bind(trace, *args, **kwargs)
        bound.apply_defaults()
        named = dict(list(bound.arguments.items())[1:])
        return session_of(trace).get(fn, trace, **named)

    return cached  # type: ignore[return-value]


def warnings_of(trace: Trace) -> list[TraceWarning]:
    """The reader's warnings on ``trace`` and those its analyses raised so far."""
    extra = [w for w in session_of(trace).warnings if w not in trace.warnings]
    return [*trace.warnings, *extra]


def whole_steps(trace: Trace) -> Trace:
    """``trace`` without a last step the profiler cut short
    (:func:`~kinetolens.model.steps.without_incomplete_steps`), one object per
    trace, so the analyses of its whole steps share one session."""
    from kinetolens.model.steps import without_incomplete_steps

    return session_of(trace).derived(without_incomplete_steps, trace)
