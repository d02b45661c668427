"""CUPTI range-profiler counter values (``cuda_profiler_range`` events).

With ``profiler_metrics=[...]`` Kineto writes one ``cuda_profiler_range``
event per kernel whose ``args`` are the counter values, keyed by metric
name (``dram__bytes_read.sum``, ``smsp__sass_thread_inst_executed_op_ffma_pred_on.sum``
...).  Metric names are open-ended, so the main decoder (which names only
the args it reads, for speed) drops them.  Instead of widening that hot
path for every trace, a trace that *has* profiler ranges is read a second
time here, decoding only what these events need; traces without them never
pay anything.

Output, long format (one row per range and metric), ranges numbered in
file order:

``range_id, name, pid, tid, ts, dur, metric, value, launch_id``  (times in
ns; ``launch_id`` null: the ranges carry no link, their order pairs them).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import polars as pl

from kinetolens.errors import TraceWarning
from kinetolens.ingest.kineto_rescan import numeric_args, optional_ns, rescan_file
from kinetolens.ingest.kineto_schema import ABSENT
from kinetolens.ingest.kineto_values import as_int
from kinetolens.registry.trace_names import PROFILER_RANGE_CAT


COUNTER_SCHEMA: dict[str, pl.DataType] = {
    "range_id": pl.Int64(),
    "name": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts": pl.Int64(),
    "dur": pl.Int64(),
    "metric": pl.String(),
    "value": pl.Float64(),
    "launch_id": pl.Int64(),
}


class _Event(msgspec.Struct, gc=False):
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = ABSENT
    dur: msgspec.Raw = ABSENT
    args: msgspec.Raw = ABSENT


def empty_counters() -> pl.DataFrame:
    return pl.DataFrame(schema=COUNTER_SCHEMA)


def read_profiler_counters(path: str | Path) -> tuple[pl.DataFrame, list[TraceWarning]]:
    """Counter values of every ``cuda_profiler_range`` event in ``path``.

    A truncated file is cut after its last complete event, as the main reader
    does, and malformed events are skipped; a file damaged past that gives an
    empty table and a warning (the main load reported the damage itself).
    """
    events = rescan_file(path, _Event)
    if events is None:
        return empty_counters(), [
            TraceWarning("CUPTI counters unreadable", 1, "the file is damaged; counter values were not loaded")
        ]
    rows: list[tuple[object, ...]] = []
    skipped = 0
    range_id = -1
    for e in events:
        if e.cat != PROFILER_RANGE_CAT:
            continue
        range_id += 1
        try:
            values = list(numeric_args(e.args))
        except msgspec.DecodeError:
            skipped += 1
            continue
        common = (range_id, e.name, as_int(e.pid), as_int(e.tid), optional_ns(e.ts), optional_ns(e.dur))
        rows.extend((*common, metric, value, None) for metric, value in values)
    warnings = []
    if skipped:
        warnings.append(TraceWarning("CUPTI counters unreadable", skipped, "profiler range args that are not a JSON object"))
    return pl.DataFrame(rows, schema=COUNTER_SCHEMA, orient="row"), warnings
