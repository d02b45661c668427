"""``kinetolens.load``: a trace file to the attributed trace model."""

from __future__ import annotations

import json
import hashlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kinetolens.cache import (
    analysis_fingerprint,
    cache_key,
    default_cache_dir,
    derived_only_entry,
    key_of,
    read_derived,
    read_keyed,
    write_derived,
    write_keyed,
)
from kinetolens.errors import TraceError, TraceWarning, shown_path
from kinetolens.formats import CAPTURE_DETAILS, CAPTURE_DIR, RUN_METADATA_KEY
from kinetolens.ingest import read_raw
from kinetolens.ingest.kineto import RawTables
from kinetolens.ingest.kineto_counter_events import read_counter_events
from kinetolens.ingest.kineto_counters import read_profiler_counters
from kinetolens.ingest.opener import check_trace_file
from kinetolens.ingest.run_metadata import read_run_metadata
from kinetolens.memory_room import check_room
from kinetolens.model import Trace, build_trace
from kinetolens.model.amend import Step, apply, with_metadata, with_table, with_warnings
from kinetolens.model.compiled_modules import attribute_generated
from kinetolens.model.earlier_launches import name_earlier_launches
from kinetolens.model.graph_replay import CAPTURE_KEY, pair_with_capture

if TYPE_CHECKING:
    import polars as pl

__all__ = ["CAPTURE_KEY", "load", "load_derived", "load_steps"]



def load(
    path: str | Path, *, capture: str | Path | bool | None = None, cache: bool | str | Path = True
) -> Trace:
    """Load a trace file into a :class:`Trace`.

    Kineto JSON (``.json``/``.json.gz``) and Nsight Systems SQLite exports are
    read; the format is detected from the content, not the name.

    ``capture``: the trace recorded while the replayed CUDA/HIP graphs were
    captured (a file, or a folder holding ``execution_details.json`` or one
    trace); kernels replayed by graph launches then take the ops that
    launched them at capture (see :mod:`kinetolens.model.graph_replay`).
    ``None`` looks for a ``capture_traces/`` folder with
    ``execution_details.json`` beside ``path``; ``False`` never pairs.

    ``cache``: ``True`` uses the default cache directory
    (``$KINETOLENS_CACHE_DIR`` or ``~/.cache/kinetolens``), a path uses that
    directory, ``False`` neither reads nor writes a cache.
    Raises :class:`TraceError` (one line, naming the file) on bad input, and
    where a Kineto file to read whole would not fit in memory
    (:mod:`kinetolens.memory_room`).

    One pipeline of ``Trace -> Trace`` steps: the build and
    :func:`_model_steps` make what the cache stores; :func:`load_steps`
    run on every load, on a trace just built or read from the cache alike.
    """
    p = Path(path)
    check_trace_file(p)
    capture_path, capture_warning = _capture_file(p, capture)
    key = _entry_key(p, capture_path)
    cache_dir = _cache_dir(cache)
    trace = read_keyed(cache_dir, key, shown_path(p)) if cache_dir is not None else None
    if trace is None:
        check_room(p)
        raw = read_raw(p)
        built = build_trace(raw, shown_path(p))  # the name shown and stored; p opens the file
        trace = apply(built, _model_steps(p, raw, built, capture_path, capture_warning))
        if cache_dir is not None:
            write_keyed(cache_dir, key, shown_path(p), trace)
    return apply(trace, load_steps(p))


def _entry_key(path: Path, capture_path: Path | None) -> str:
    """The cache key of ``path`` (paired with ``capture_path``, if any)."""
    key = cache_key(path)
    if capture_path is not None:
        key = key_of(f"{key}|capture|{cache_key(capture_path)}")
    return key


T = TypeVar("T")


def _cache_dir(cache: bool | str | Path) -> Path | None:
    return None if cache is False else default_cache_dir() if cache is True else Path(cache)


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
    cache_dir = _cache_dir(cache)
    if cache_dir is None:
        return _computed(p, compute, from_file, capture, False)[0]
    capture_path, _ = _capture_file(p, capture)
    entry = cache_dir / _entry_key(p, capture_path)
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
    return compute(load(path, capture=capture, cache=cache)), True


def _model_steps(
    path: Path, raw: RawTables, built: Trace, capture_path: Path | None, capture_warning: TraceWarning | None
) -> list[Step]:
    """The steps after the build whose result the cache stores: kernels
    launched before the window named, the counter tables (their args are
    read again from the file), the graph capture's ops paired in."""
    steps: list[Step] = [name_earlier_launches]
    if built.format == "kineto-json" and (built.device_events["kind"] == "profiler_range").any():
        steps.append(partial(_read_table, "kernel_counters", read_profiler_counters, path))
    if built.format == "kineto-json" and raw.counters.height:
        steps.append(partial(_read_table, "counters", read_counter_events, path))
    if capture_warning is not None:
        steps.append(partial(with_warnings, warnings=[capture_warning]))
    if capture_path is not None:
        captured = build_trace(read_raw(capture_path), shown_path(capture_path))
        steps.append(partial(pair_with_capture, captured=captured, capture_name=shown_path(capture_path)))
    return steps


def _read_table(name: str, reader: Callable[[Path], tuple[pl.DataFrame, list[TraceWarning]]], path: Path,
                trace: Trace) -> Trace:
    """``trace`` with its table ``name`` as ``reader`` reads it from ``path``."""
    frame, warnings = reader(path)
    return with_table(trace, name, frame, warnings)


def load_steps(path: Path) -> list[Step]:
    """The steps of every load, after the cache: the run metadata beside the
    trace (not cached: the file is small and written after the trace) and
    torch.compile's kernels moved into the submodules they fuse."""
    run = read_run_metadata(path)
    if run is None:
        return []
    return [partial(with_metadata, **{RUN_METADATA_KEY: run}), attribute_generated]


def pairs_with_capture(path: Path, capture: str | Path | bool | None) -> bool:
    """Whether a load of ``path`` pairs it with a graph capture trace: one
    given, or a ``capture_traces/`` folder with its details beside it."""
    if capture is False:
        return False
    if capture is None or capture is True:
        return (path.parent / CAPTURE_DIR / CAPTURE_DETAILS).is_file()
    return True


def _capture_file(path: Path, capture: str | Path | bool | None) -> tuple[Path | None, TraceWarning | None]:
    """The capture trace to pair ``path`` with, and a warning when the one
    found beside it cannot be used (an explicit ``capture`` that cannot be
    used raises :class:`TraceError` instead)."""
    if not pairs_with_capture(path, capture):
        return None, None
    if capture is None or capture is True:
        try:
            return _capture_in(path.parent / CAPTURE_DIR), None
        except TraceError as err:
            return None, TraceWarning("graph capture trace not used", 1, str(err))
    cp = Path(capture)
    if not cp.exists():
        raise TraceError(cp, "no such capture trace")
    return (_capture_in(cp) if cp.is_dir() else cp), None


def _capture_in(folder: Path) -> Path:
    """The capture trace in ``folder``: the one ``execution_details.json``
    names, else its only Kineto trace."""
    details = folder / CAPTURE_DETAILS
    if details.is_file():
        try:
            entries = json.loads(details.read_bytes())
        except (OSError, ValueError) as err:
            raise TraceError(details, f"unreadable: {err}") from None
        entries = entries if isinstance(entries, list) else [entries]
        names = [e.get("file") for e in entries if isinstance(e, dict) and isinstance(e.get("file"), str)]
        if not names:
            raise TraceError(details, "names no capture trace (no \"file\" entry)")
        named = folder / names[0]
        if not named.is_file():
            raise TraceError(details, f"names {names[0]}, which is not in {shown_path(folder)}")
        return named
    traces = sorted(f for f in folder.iterdir() if f.name.endswith((".json", ".json.gz")))
    if len(traces) != 1:
        raise TraceError(folder, f"holds {len(traces)} trace files and no {CAPTURE_DETAILS}; name the capture trace")
    return traces[0]
