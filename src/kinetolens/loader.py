"""``kinetolens.load``: a trace file to the attributed trace model."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from kinetolens.cache import read_keyed, write_keyed
from kinetolens.errors import TraceWarning, shown_path
from kinetolens.formats import RUN_METADATA_KEY
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
from kinetolens.sources import cache_dir_of, capture_file, entry_key

if TYPE_CHECKING:
    import polars as pl

__all__ = ["CAPTURE_KEY", "load", "load_steps"]


def load(
    path: str | Path, *, capture: str | Path | bool | None = None, cache: bool | str | Path = True,
    ncu: str | Path | None = None,
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

    ``ncu``: an Nsight Compute raw CSV of the same step (``ncu --csv --page
    raw --print-units base``): its per-kernel counters become the trace's
    ``kernel_counters``, each paired with the trace's kernel of the same
    function, grid and block in launch order
    (:mod:`kinetolens.model.ncu_pairing`).

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
    capture_path, capture_warning = capture_file(p, capture)
    key = entry_key(p, capture_path)
    cache_dir = cache_dir_of(cache)
    trace = read_keyed(cache_dir, key, shown_path(p)) if cache_dir is not None else None
    if trace is None:
        check_room(p)
        raw = read_raw(p)
        built = build_trace(raw, shown_path(p))  # the name shown and stored; p opens the file
        trace = apply(built, _model_steps(p, raw, built, capture_path, capture_warning))
        if cache_dir is not None:
            write_keyed(cache_dir, key, shown_path(p), trace)
    return apply(trace, [*load_steps(p), *ncu_steps(ncu)])


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


def ncu_steps(ncu: str | Path | None) -> list[Step]:
    """Pairing Nsight Compute's counters in, where a CSV is given (read on
    every load, not cached: the trace's cache entry stays the trace's own)."""
    if ncu is None:
        return []
    from kinetolens.ingest.ncu_csv import read_ncu_csv
    from kinetolens.model.ncu_pairing import pair_ncu

    return [partial(pair_ncu, ncu=read_ncu_csv(ncu))]


def load_steps(path: Path) -> list[Step]:
    """The steps of every load, after the cache: the run metadata beside the
    trace (not cached: the file is small and written after the trace) and
    torch.compile's kernels moved into the submodules they fuse."""
    run = read_run_metadata(path)
    if run is None:
        return []
    return [partial(with_metadata, **{RUN_METADATA_KEY: run}), attribute_generated]
