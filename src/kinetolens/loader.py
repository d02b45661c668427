"""``kinetolens.load``: a trace file to the attributed trace model."""

from __future__ import annotations

from pathlib import Path

from kinetolens.cache import default_cache_dir, read_cached, write_cached
from kinetolens.errors import TraceError, shown_path
from kinetolens.formats import RUN_METADATA_KEY
from kinetolens.ingest import read_raw
from kinetolens.ingest.kineto_counter_events import read_counter_events
from kinetolens.ingest.kineto_counters import read_profiler_counters
from kinetolens.ingest.run_metadata import read_run_metadata
from kinetolens.model import Trace, build_trace


def load(path: str | Path, *, cache: bool | str | Path = True) -> Trace:
    """Load a trace file into a :class:`Trace`.

    Kineto JSON (``.json``/``.json.gz``) and Nsight Systems SQLite exports are
    read; the format is detected from the content, not the name.

    ``cache``: ``True`` uses the default cache directory
    (``$KINETOLENS_CACHE_DIR`` or ``~/.cache/kinetolens``), a path uses that
    directory, ``False`` neither reads nor writes a cache.
    Raises :class:`TraceError` (one line, naming the file) on bad input.
    """
    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file")
    if p.is_dir():
        raise TraceError(p, "is a directory, expected a trace file")
    cache_dir = None
    if cache is not False:
        cache_dir = default_cache_dir() if cache is True else Path(cache)
        cached = read_cached(cache_dir, p)
        if cached is not None:
            return _with_run_metadata(cached, p)
    raw = read_raw(p)
    trace = build_trace(raw, shown_path(p))  # the name shown and stored; p opens the file
    if trace.format == "kineto-json" and (trace.device_events["kind"] == "profiler_range").any():
        trace.kernel_counters, counter_warnings = read_profiler_counters(p)
        trace.warnings.extend(counter_warnings)
    if trace.format == "kineto-json" and raw.counters.height:  # counter events: their args, read again
        trace.counters, counter_warnings = read_counter_events(p)
        trace.warnings.extend(counter_warnings)
    if cache_dir is not None:
        write_cached(cache_dir, p, trace)
    return _with_run_metadata(trace, p)


def _with_run_metadata(trace: Trace, path: Path) -> Trace:
    """Read beside the trace on every load (not cached: the file is small and written after the trace)."""
    run = read_run_metadata(path)
    if run is not None:
        trace.metadata = {**trace.metadata, RUN_METADATA_KEY: run}
    return trace
