"""The summary of a trace too large to hold, read one step window at a time.

From :data:`WINDOWED_FROM_BYTES` of (uncompressed) Kineto JSON, ``kinetolens
summary`` decodes the file to Parquet parts in a temporary folder, finds its
steps, and builds each step's window in turn, keeping only what the window
adds to the summary (:mod:`kinetolens.analysis.summary_windows`): memory
holds a step, not the file.  A trace without ``ProfilerStep`` ranges, with
no whole step, or of an inference engine is read whole, as before.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import polars as pl

from kinetolens.analysis.inference.phases import inference_block
from kinetolens.analysis.memory.usage import PEAK_COLUMNS, peaks_of
from kinetolens.analysis.paths.sampling import SAMPLE_STEPS
from kinetolens.analysis.summary_types import Summary
from kinetolens.analysis.hardware.gpu_metrics import steps_span
from kinetolens.analysis.summary_windows import summarize_windows, window_part
from kinetolens.ingest.kineto_parallel import estimated_json_bytes
from kinetolens.ingest.opener import StreamUnsupported
from kinetolens.ingest.spill import Spill
from kinetolens.windowed import Windowed, open_windows

#: Kineto JSON at least this large (uncompressed) is summarized a step window
#: at a time: read whole it takes about its own size in memory.
WINDOWED_FROM_BYTES = 1_500_000_000

__all__ = ["WINDOWED_FROM_BYTES", "summary_in_windows", "wants_windows"]


def wants_windows(path: Path) -> bool:
    """Whether ``path`` is Kineto JSON large enough to summarize a step window at a time."""
    name = path.name.lower()
    return name.endswith((".json", ".json.gz")) and estimated_json_bytes(path) >= WINDOWED_FROM_BYTES


def summary_in_windows(path: Path, spill_root: Path | None = None) -> Summary | None:
    """The summary of ``path`` read a step window at a time, or None where it
    cannot be (no steps, no whole step, an inference engine's iterations, a
    file the streaming reader does not take): the caller then reads it whole.
    The Parquet parts go to a temporary folder (under ``spill_root``), removed after."""
    with tempfile.TemporaryDirectory(prefix="kinetolens-windows-", dir=spill_root) as folder:
        try:
            windowed = open_windows(path, folder)
        except StreamUnsupported:
            return None
        return _summary(windowed)


def _summary(windowed: Windowed) -> Summary | None:
    steps = windowed.steps
    chosen = windowed.sample(SAMPLE_STEPS)
    if steps.height == 0 or chosen is None:
        return None
    sample = windowed.load(chosen)
    if inference_block(sample).iterations:
        return None
    whole = steps.filter(pl.col("complete")).height
    span = steps_span(steps)
    reader = list(windowed.spill.warnings)
    parts = (window_part(w.step, trace, w.own, span, reader) for w, trace in windowed.traces())
    note = (
        f"read a step window at a time ({steps.height} steps): the program's kind and the recommendations "
        f"are from steps {chosen.steps[0]}-{chosen.steps[-1]} ({len(chosen.steps)} of {whole} whole steps)"
    )
    return summarize_windows(parts, steps=steps, peaks=_peaks(windowed.spill), sample=sample, sampled=note, reader=reader)


def _peaks(spill: Spill) -> pl.DataFrame:
    """Peak memory per device from the allocator events (their columns the peaks read)."""
    columns: list[str | pl.Expr] = list(PEAK_COLUMNS)
    parts = list(spill.each_part("memory", columns))
    return peaks_of(pl.concat(parts) if parts else pl.DataFrame(schema={c: pl.Int64 for c in PEAK_COLUMNS}))
