"""``kinetolens.load``: a trace file to the attributed trace model."""

from __future__ import annotations

import json
from pathlib import Path

from kinetolens.cache import cache_key, default_cache_dir, key_of, read_keyed, write_keyed
from kinetolens.errors import TraceError, TraceWarning, shown_path
from kinetolens.formats import CAPTURE_DETAILS, CAPTURE_DIR, RUN_METADATA_KEY
from kinetolens.ingest import read_raw
from kinetolens.ingest.kineto_counter_events import read_counter_events
from kinetolens.ingest.kineto_counters import read_profiler_counters
from kinetolens.ingest.run_metadata import read_run_metadata
from kinetolens.model import Trace, build_trace
from kinetolens.model.compiled_modules import attribute_generated
from kinetolens.model.graph_replay import attach_capture

#: Metadata key naming the graph capture trace a replay's kernels were paired with.
CAPTURE_KEY = "graph_capture"


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
    Raises :class:`TraceError` (one line, naming the file) on bad input.
    """
    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file")
    if p.is_dir():
        raise TraceError(p, "is a directory, expected a trace file")
    capture_path, capture_warning = _capture_file(p, capture)
    cache_dir = None
    key = cache_key(p)
    if capture_path is not None:
        key = key_of(f"{key}|capture|{cache_key(capture_path)}")
    if cache is not False:
        cache_dir = default_cache_dir() if cache is True else Path(cache)
        cached = read_keyed(cache_dir, key, shown_path(p))
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
    if capture_warning is not None:
        trace.warnings.append(capture_warning)
    if capture_path is not None:
        _pair_with_capture(trace, capture_path)
    if cache_dir is not None:
        write_keyed(cache_dir, key, shown_path(p), trace)
    return _with_run_metadata(trace, p)


def _pair_with_capture(trace: Trace, capture_path: Path) -> None:
    """Link the replayed kernels of ``trace`` to the capture trace's ops (in place)."""
    captured = build_trace(read_raw(capture_path), shown_path(capture_path))
    paired = attach_capture(trace.ops, trace.kernels, captured.ops, captured.runtime)
    trace.ops, trace.kernels = paired.ops, paired.kernels
    trace.metadata = {**trace.metadata, CAPTURE_KEY: shown_path(capture_path)}
    if paired.unmatched:
        trace.warnings.append(
            TraceWarning(
                "replayed kernels without a captured node",
                paired.unmatched,
                f"no graph captured in {shown_path(capture_path)} has their launch's kernels; "
                "kept with the op around the graph launch",
            )
        )
    if paired.ambiguous:
        trace.warnings.append(
            TraceWarning(
                "replayed kernels matching graphs captured with different shapes",
                paired.ambiguous,
                "several captured graphs hold the same kernels with different op shapes (one per batch size?); "
                "replays took them in turn, so their shapes and FLOPs may be another capture's",
            )
        )


def _capture_file(path: Path, capture: str | Path | bool | None) -> tuple[Path | None, TraceWarning | None]:
    """The capture trace to pair ``path`` with, and a warning when the one
    found beside it cannot be used (an explicit ``capture`` that cannot be
    used raises :class:`TraceError` instead)."""
    if capture is False:
        return None, None
    if capture is None or capture is True:
        folder = path.parent / CAPTURE_DIR
        if not (folder / CAPTURE_DETAILS).is_file():
            return None, None
        try:
            return _capture_in(folder), None
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


def _with_run_metadata(trace: Trace, path: Path) -> Trace:
    """Read beside the trace on every load (not cached: the file is small and written after the trace)."""
    run = read_run_metadata(path)
    if run is not None:
        trace.metadata = {**trace.metadata, RUN_METADATA_KEY: run}
        attribute_generated(trace)  # torch.compile's kernels into the submodules they fuse
    return trace
