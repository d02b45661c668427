"""Whether a command reads a trace a step window at a time.

Kept apart from :mod:`kinetolens.runs.windowed_read` so that every command
can ask without importing the windowed readers and the analyses behind them.
"""

from __future__ import annotations

from pathlib import Path

from kinetolens.ingest.kineto_parallel import estimated_json_bytes
from kinetolens.sources import pairs_with_capture

#: Kineto JSON at least this large (uncompressed) is read a step window at a
#: time: read whole it takes about its own size in memory.
WINDOWED_FROM_BYTES = 1_500_000_000
#: The memory a process plans for a trace read a step window at a time,
#: whatever its size: it holds a step and what the windows add up
#: (docs/BENCHMARKS.md: 0.25-0.5 GB for 1 GB of JSON, 1.7 GB for a 10 GB
#: trace's summary), not the trace.
WINDOWED_PEAK_BYTES = 2 << 30


def reads_in_windows(path: Path, windows: bool | None, capture: str | None = None) -> bool:
    """Whether a command reads ``path`` a step window at a time: as ``--windows``
    (True) or ``--whole`` (False) say, else (None) where it is Kineto JSON too
    large to hold (:data:`WINDOWED_FROM_BYTES`); never a file that is not
    local, nor one paired with a graph capture trace (``capture``, or one
    beside it: the pairing takes the whole trace)."""
    if not path.is_file() or pairs_with_capture(path, capture):
        return False
    if windows is not None:
        return windows
    name = path.name.lower()
    return name.endswith((".json", ".json.gz")) and estimated_json_bytes(path) >= WINDOWED_FROM_BYTES
