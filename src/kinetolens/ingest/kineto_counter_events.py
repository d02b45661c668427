"""Values of Chrome counter events (``ph: "C"``), one row per event and arg.

A counter event's ``args`` are the series it sets (``{"allocated": ...,
"reserved": ...}`` from ``kinetolens.profile(sample_rate=N)``, ``{"GPU
Utilization": 0.4}`` from Kineto's GPU metrics).  The keys are open-ended,
and the main decoder names only the args it reads, for speed, so it keeps
just the events' times and names.  A trace that has counter events is read a
second time here, decoding only the few fields these need; traces without
them (nearly all) never pay anything.

Output, long format, events numbered in file order:

``event, name, cat, pid, tid, ts, key, value, device``  (``ts`` in ns; every
numeric arg becomes a Float64 ``value``, exact for integers below 2**53, which
covers any byte count a machine has; non-numeric args are left out).  Kineto's
CUPTI PM-sampling tracks have the process name ``"GPU N Counters"`` as their
``pid``, no number: ``device`` is that N (null for every other counter).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from kinetolens.errors import TraceWarning
from kinetolens.ingest.kineto_rescan import numeric_args, optional_ns, rescan_file
from kinetolens.ingest.kineto_schema import ABSENT
from kinetolens.ingest.kineto_values import as_int
from kinetolens.registry.trace_names import GPU_COUNTER_TRACK

COUNTER_EVENT_SCHEMA: dict[str, pl.DataType] = {
    "event": pl.Int64(),
    "name": pl.String(),
    "cat": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts": pl.Int64(),
    "key": pl.String(),
    "value": pl.Float64(),
    "device": pl.Int64(),
}

_GPU_TRACK = re.compile(GPU_COUNTER_TRACK)


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = ABSENT
    args: msgspec.Raw = ABSENT


def counter_track_device(pid: int | str | None) -> int | None:
    """The GPU of a ``"GPU N Counters"`` track, else None."""
    if not isinstance(pid, str):
        return None
    match = _GPU_TRACK.match(pid.strip())
    return int(match.group(1)) if match else None


def empty_counter_events() -> pl.DataFrame:
    return pl.DataFrame(schema=COUNTER_EVENT_SCHEMA)


def read_counter_events(path: str | Path) -> tuple[pl.DataFrame, list[TraceWarning]]:
    """Every numeric arg of every counter event in ``path``.

    Events are decoded one by one so a malformed one is skipped (as the main
    reader does); a file damaged past recovery gives an empty table and a
    warning, since the main load has already reported the damage.
    """
    events = rescan_file(path, _Event)
    if events is None:
        return empty_counter_events(), [
            TraceWarning("counter events unreadable", 1, "the file is damaged; counter values were not loaded")
        ]
    rows: list[tuple[Any, ...]] = []
    skipped = 0
    for index, e in enumerate(e for e in events if e.ph == "C"):
        try:
            values = list(numeric_args(e.args))
            ts = optional_ns(e.ts)
        except (msgspec.DecodeError, ValueError, ArithmeticError):
            skipped += 1
            continue
        common = (index, e.name, e.cat, as_int(e.pid), as_int(e.tid), ts)
        device = counter_track_device(e.pid)
        rows.extend((*common, key, value, device) for key, value in values)
    warnings = []
    if skipped:
        warnings.append(TraceWarning("counter events unreadable", skipped, "counter events whose args or time are malformed"))
    return pl.DataFrame(rows, schema=COUNTER_EVENT_SCHEMA, orient="row"), warnings
