"""Results kept with a trace's cache entry (the summary): read back, when
the entry, the analyses' code and the run metadata are those they came
from, without loading the trace, so without importing polars."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kinetolens.cache import analysis_fingerprint, derived_only_entry, read_derived, write_derived
from kinetolens.errors import shown_path
from kinetolens.ingest.opener import check_trace_file
from kinetolens.ingest.run_metadata import read_run_metadata
from kinetolens.sources import cache_dir_of, capture_file, entry_key

if TYPE_CHECKING:
    from kinetolens.model.trace import Trace

T = TypeVar("T")


def load_derived(
    path: str | Path,
    name: str,
    compute: Callable[[Trace], T],
    into: type[T],
    *,
    capture: str | Path | bool | None = None,
    cache: bool | str | Path = True,
    from_file: Callable[[Path], T | None] | None = None,
) -> T:
    """``compute(load(path))``, stored with the trace's cache entry as ``name``.

    ``from_file``: computes the result from the file itself instead (a trace
    too large to load whole), or returns None to leave it to ``compute``.

    For results that cost far more than reading them back (the summary, with
    the recommendations' simulated savings).  A stored result is used when
    the entry is the one it came from, the analyses' code is the same and the
    run metadata beside the trace (read on every load, not cached) is too: it
    is then returned without loading the tables.  ``compute`` returns an
    ``into`` (a typed result): it is stored as JSON and read back into it.
    Without a cache (``cache=False``) it is ``compute(load(path))``.
    """
    p = Path(path)
    check_trace_file(p)
    cache_dir = cache_dir_of(cache)
    if cache_dir is None:
        return _computed(p, compute, from_file, capture, False)[0]
    capture_path, _ = capture_file(p, capture)
    entry = cache_dir / entry_key(p, capture_path)
    run = json.dumps(read_run_metadata(p), sort_keys=True, default=str)
    basis = hashlib.sha256(f"{analysis_fingerprint()}|{shown_path(p)}|{run}".encode()).hexdigest()[:32]
    stored = read_derived(entry, name, basis, into)
    if stored is not None:
        return stored
    value, loaded = _computed(p, compute, from_file, capture, cache_dir)
    if not loaded:
        derived_only_entry(cache_dir, entry.name)  # no tables were loaded to store
    write_derived(entry, name, basis, value)
    return value


def _computed(path: Path, compute: Callable[[Trace], T], from_file: Callable[[Path], T | None] | None,
              capture: str | Path | bool | None, cache: bool | Path) -> tuple[T, bool]:
    """``from_file(path)``, or where it gives none ``compute`` of the loaded
    trace; and whether the trace was loaded."""
    value = from_file(path) if from_file is not None else None
    if value is not None:
        return value, False
    from kinetolens.loader import load  # the readers and the model: only where a result is computed

    return compute(load(path, capture=capture, cache=cache)), True
