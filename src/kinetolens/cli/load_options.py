"""How a command loads its trace: the options, declared once for every command.

``@trace_load_options()`` gives a command ``--no-cache`` (and, with
``capture=True``, ``--capture``) and hands the command one
:class:`TraceLoading` instead of the raw flags; ``loading.load(path)`` is the
loader call every command makes.  Nothing here imports polars: the loader is
imported when a trace is loaded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from kinetolens.model.trace import Trace

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

#: ``--capture PATH``: the graph capture trace a replay trace's kernels pair with.
capture_option = click.option(
    "--capture",
    type=click.Path(exists=True),
    default=None,
    help="Graph capture trace (file or folder) for a CUDA/HIP graph replay trace; "
    "default: capture_traces/ beside TRACE when it holds execution_details.json.",
)

no_cache_option = click.option("--no-cache", is_flag=True, help="Neither read nor write the cache.")

#: ``--ncu CSV``: Nsight Compute's counters of the same step, paired with the trace's kernels.
ncu_option = click.option(
    "--ncu",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Nsight Compute raw CSV of the same step (ncu --csv --page raw --print-units base): "
    "its per-kernel counters, paired with TRACE's kernels by name, grid and block.",
)


@dataclass(frozen=True)
class TraceLoading:
    """What the load options asked for."""

    #: False with ``--no-cache``: neither read nor write the cache.
    cache: bool = True
    #: ``--capture``: the graph capture trace, or None to look beside the trace.
    capture: str | None = None
    #: ``--ncu``: an Nsight Compute CSV whose counters pair with the trace's kernels.
    ncu: str | None = None

    def load(self, path: str) -> Trace:
        """``kinetolens.load`` with these options."""
        from kinetolens.loader import load

        return load(path, capture=self.capture, cache=self.cache, ncu=self.ncu)

    def derived(
        self, path: str, name: str, compute: Callable[[Trace], T], into: type[T],
        from_file: Callable[[Path], T | None] | None = None,
    ) -> T:
        """``compute(self.load(path))`` (or ``from_file(path)`` where that gives
        one), kept with the trace's cache entry as ``name`` so that the next
        run reads it instead (``kinetolens.derived.load_derived``)."""
        from kinetolens.derived import load_derived

        if self.ncu is not None:  # the stored result is the trace's own, without these counters
            return compute(self.load(path))
        return load_derived(path, name, compute, into, capture=self.capture, cache=self.cache, from_file=from_file)

    def in_windows(self, path: str | Path, windows: bool | None, read: Callable[[Path, list[str]], T | None]) -> T | None:
        """``read(path, notes)`` where the trace is read a step window at a time
        (``--windows``, or its size without ``--windows/--whole``; never one
        paired with a graph capture), its notes on stderr; None to read it whole."""
        from kinetolens.cli.render import echo_notes
        from kinetolens.runs.window_choice import reads_in_windows

        p = Path(path)
        if self.ncu is not None or not reads_in_windows(p, windows, self.capture):
            return None
        notes: list[str] = []
        try:
            return read(p, notes)
        finally:
            echo_notes(notes)


def trace_load_options(*, capture: bool = False, ncu: bool = False) -> Callable[[F], F]:
    """Add the trace-loading options to a command; it receives ``loading: TraceLoading``.

    ``capture``: also offer ``--capture`` (commands whose tables pair graph
    replays with their capture); ``ncu``: also offer ``--ncu`` (commands that
    read per-kernel hardware counters).
    """

    offer_capture, offer_ncu = capture, ncu

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def with_loading(
            *args: Any, no_cache: bool, capture: str | None = None, ncu: str | None = None, **kwargs: Any
        ) -> Any:
            return command(*args, loading=TraceLoading(cache=not no_cache, capture=capture, ncu=ncu), **kwargs)

        # In --help, --no-cache comes first (decorators apply bottom-up).
        decorated: Any = with_loading
        if offer_ncu:
            decorated = ncu_option(decorated)
        if offer_capture:
            decorated = capture_option(decorated)
        return no_cache_option(decorated)  # type: ignore[no-any-return]

    return decorate


#: For commands over a run's ranks: one rank's bad trace stops the command instead of being left out.
strict_option = click.option(
    "--strict", is_flag=True,
    help="A run with a rank whose trace cannot be read: stop with its error (exit 2) instead of leaving that rank out.",
)  # fmt: skip
