"""The critical path as a track of its own in the annotated Perfetto trace.

:func:`kinetolens.views.perfetto.chrome_trace` writes the trace itself; this
adds one process, "critical path", with one thread per analysed window.
Each stretch of the path that takes time is a slice there, at the time it
starts and as long as it counts. It is named by what bounds it and by the
op, kernel or call it belongs to. Clicking a slice shows its module, source
line and the thread or stream it ran on. Zero-time links (dependencies,
synchronizations) are not drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from kinetolens.analysis.paths.critical_path import CriticalPath
from kinetolens.model.trace import Trace
from kinetolens.views.perfetto import write_chrome_trace

#: A pid no profiler uses, so the track sorts apart from the trace's own.
PATH_PID = 2**31 - 2
CATEGORY = "critical_path"


def path_events(paths: list[CriticalPath], labels: dict[str, str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": PATH_PID, "tid": 0, "args": {"name": "critical path"}},
        {"ph": "M", "name": "process_sort_index", "pid": PATH_PID, "tid": 0, "args": {"sort_index": -1}},
    ]
    for tid, cp in enumerate(paths):
        label = f"{cp.window.label}: {cp.length_us / 1000:,.3f} ms"
        events.append({"ph": "M", "name": "thread_name", "pid": PATH_PID, "tid": tid, "args": {"name": label}})
        rows = cp.path.filter(pl.col("us") > 0).select("bound_by", "us", "name", "op", "module", "source", "where", "start_us", "type")
        for row in rows.iter_rows(named=True):
            args = {k: row[k] for k in ("bound_by", "type", "name", "op", "module", "source", "where") if row[k] is not None}
            events.append(
                {
                    "ph": "X",
                    "cat": CATEGORY,
                    "name": f"{labels.get(row['bound_by'], row['bound_by'])}: {row['name'] or '-'}",
                    "pid": PATH_PID,
                    "tid": tid,
                    "ts": round(row["start_us"], 3),
                    "dur": round(row["us"], 3),
                    "args": args,
                }
            )
    return events


def write_trace_with_path(trace: Trace, paths: list[CriticalPath], labels: dict[str, str], path: str | Path) -> int:
    """The annotated trace plus the critical-path track (gzip when ``path`` ends in ``.gz``); the event count."""
    return write_chrome_trace(trace, path, path_events(paths, labels))
