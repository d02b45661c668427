"""Small ``Trace -> Trace`` steps the loader composes after the build.

The Trace is frozen: each step returns a new one (``dataclasses.replace``)
and leaves its input as it was, so a trace read from the cache and one
just built go through the same steps (:func:`kinetolens.loader.load`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import polars as pl

from kinetolens.errors import TraceWarning
from kinetolens.model.schema import conform_trace
from kinetolens.model.trace import Trace

#: One step of the loader's pipeline.
Step = Callable[[Trace], Trace]


def apply(trace: Trace, steps: Iterable[Step]) -> Trace:
    """``trace`` through ``steps`` in order, the result checked against the
    schema (:class:`~kinetolens.model.schema.SchemaMismatch` names a step's
    broken table)."""
    for step in steps:
        trace = step(trace)
    return conform_trace(trace)


def with_warnings(trace: Trace, warnings: Iterable[TraceWarning]) -> Trace:
    """``trace`` with ``warnings`` added after its own."""
    added = list(warnings)
    return dataclasses.replace(trace, warnings=[*trace.warnings, *added]) if added else trace


def with_metadata(trace: Trace, **entries: Any) -> Trace:
    """``trace`` with ``entries`` added to (or replacing keys of) its metadata."""
    return dataclasses.replace(trace, metadata={**trace.metadata, **entries})


def with_table(trace: Trace, name: str, frame: pl.DataFrame, warnings: Iterable[TraceWarning] = ()) -> Trace:
    """``trace`` with its table ``name`` replaced by ``frame`` (read by the
    loader, e.g. the counter tables) and the reader's ``warnings`` added."""
    return with_warnings(dataclasses.replace(trace, **{name: frame}), warnings)
