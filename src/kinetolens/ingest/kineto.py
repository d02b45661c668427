"""Decode Kineto (Chrome trace JSON) events into columnar polars tables.

Readers hand this module chunks of events (the streaming reader one piece
of the file at a time, the whole-file reader slices of its event list);
each chunk is decoded into typed structs, routed to its table and turned
into columns before the next one is decoded, so no per-event Python dict
ever exists and at most a chunk of structs is alive.

Output tables (all times are integer nanoseconds, exact):

* ``host``: host-side ``X`` ranges (ops, annotations, python functions,
  runtime/driver calls, syncs);
* ``device``: device-side ``X`` events (kernels, memcpy, memset, GPU
  annotations, CUPTI profiler ranges);
* ``memory``: ``[memory]`` allocator instants;
* ``flows``: ``s``/``f``/``t`` flow events (``fwdbwd`` and others) but the
  ``ac2g`` launch arrows, which repeat the device events' correlation ids;
* ``threads`` and ``processes``: names from metadata events;
* ``counters``: counter (``C``) events' pid, time and name; their args are
  open-ended and read only for traces that have any
  (:mod:`kinetolens.ingest.kineto_counter_events`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kinetolens.errors import TraceError, TraceWarning
from kinetolens.ingest.kineto_columns import (
    NO_CAT,
    Partition,
    counter_frame,
    device_frame,
    flow_frame,
    host_frame,
    memory_frame,
    partition,
    process_frame,
    thread_frame,
)
from kinetolens.ingest.kineto_schema import Event
from kinetolens.ingest.kineto_values import (
    INT64_MAX,
    ColumnError,
    NeedsExactTime,
    out_of_range_message,
)


@dataclass
class RawTables:
    """What one Kineto file holds, before any linking."""

    format: str
    metadata: dict[str, Any]
    host: pl.DataFrame
    device: pl.DataFrame
    memory: pl.DataFrame
    flows: pl.DataFrame
    threads: pl.DataFrame
    processes: pl.DataFrame
    counters: pl.DataFrame
    warnings: list[TraceWarning] = field(default_factory=list)


HOST_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.Categorical(),
    "cat": pl.Categorical(),
    "name": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts": pl.Int64(),
    "dur": pl.Int64(),
    "external_id": pl.Int64(),
    "correlation": pl.Int64(),
    "sequence_number": pl.Int64(),
    "fwd_thread_id": pl.Int64(),
    "record_function_id": pl.Int64(),
    "input_dims": pl.String(),
    "input_types": pl.String(),
    "concrete_inputs": pl.String(),
    "call_stack": pl.String(),
    "python_id": pl.Int64(),
    "python_parent_id": pl.Int64(),
    "python_module_id": pl.Int64(),
    "cbid": pl.Int64(),
    "kernel": pl.String(),
    "collective_name": pl.String(),
    "in_msg_nelems": pl.Int64(),
    "out_msg_nelems": pl.Int64(),
    "group_size": pl.Int64(),
    "comm_dtype": pl.String(),
    "process_group_name": pl.String(),
    "process_group_desc": pl.String(),
    "process_group_ranks": pl.String(),
    "comm_seq": pl.Int64(),
}

DEVICE_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.Categorical(),
    "cat": pl.Categorical(),
    "name": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts": pl.Int64(),
    "dur": pl.Int64(),
    "device": pl.Int64(),
    "stream": pl.Int64(),
    "context": pl.Int64(),
    "correlation": pl.Int64(),
    "external_id": pl.Int64(),
    "queued": pl.Int64(),
    "grid_x": pl.Int64(),
    "grid_y": pl.Int64(),
    "grid_z": pl.Int64(),
    "block_x": pl.Int64(),
    "block_y": pl.Int64(),
    "block_z": pl.Int64(),
    "registers_per_thread": pl.Int64(),
    "shared_memory": pl.Int64(),
    "blocks_per_sm": pl.Float64(),
    "warps_per_sm": pl.Float64(),
    "occupancy": pl.Float64(),
    "bytes": pl.Int64(),
    "memory_bw_gbps": pl.Float64(),
    # CUDA >= 12 Kineto: the graph and node a replayed kernel or copy ran as.
    "graph_id": pl.Int64(),
    "graph_node": pl.Int64(),
}

MEMORY_SCHEMA: dict[str, pl.DataType] = {
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts": pl.Int64(),
    "device_type": pl.Int64(),
    "device_id": pl.Int64(),
    "addr": pl.Int64(),
    "bytes": pl.Int64(),
    "total_allocated": pl.Int64(),
    "total_reserved": pl.Int64(),
}

FLOW_SCHEMA: dict[str, pl.DataType] = {
    "ph": pl.Categorical(),
    "cat": pl.Categorical(),
    "id": pl.Int64(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts": pl.Int64(),
}

THREAD_SCHEMA: dict[str, pl.DataType] = {"pid": pl.Int64(), "tid": pl.Int64(), "name": pl.String()}
PROCESS_SCHEMA: dict[str, pl.DataType] = {"pid": pl.Int64(), "name": pl.String(), "labels": pl.String()}
COUNTER_SCHEMA: dict[str, pl.DataType] = {
    "pid": pl.Int64(),
    "ts": pl.Int64(),
    "name": pl.String(),
    "args": pl.String(),
}


TABLES: dict[str, dict[str, pl.DataType]] = {
    "host": HOST_SCHEMA,
    "device": DEVICE_SCHEMA,
    "memory": MEMORY_SCHEMA,
    "flows": FLOW_SCHEMA,
    "threads": THREAD_SCHEMA,
    "processes": PROCESS_SCHEMA,
    "counters": COUNTER_SCHEMA,
}

#: Decodes one chunk of events; ``True`` asks for timestamps kept exact.
ChunkSource = Callable[[bool], Sequence[Event]]

#: Tables of events that carry a time (an event in none of them is not usable).
TIMED_TABLES = ("host", "device", "memory", "counters")


@dataclass
class Decoded:
    """The tables of a Kineto file, and what was left out of them."""

    tables: dict[str, pl.DataFrame]
    warnings: list[TraceWarning]


def skipped_warnings(skipped: Counter[str]) -> list[TraceWarning]:
    """One counted warning per reason events were left out."""
    return [
        TraceWarning("events without a category" if reason == NO_CAT else "events skipped", n, reason)
        for reason, n in skipped.items()
        if n
    ]


def _frame(path: str, table: str, build: Callable[[], dict[str, pl.Series]]) -> pl.DataFrame:
    """One table's columns for one chunk, in schema order and types."""
    schema = TABLES[table]
    try:
        cols = build()
    except ColumnError as err:
        raise TraceError(path, out_of_range_message(table, err)) from None
    # Series.cast only where the dtype differs: a frame-wide cast per chunk
    # is a lazy query each time, a measurable cost over hundreds of chunks.
    return pl.DataFrame(
        [
            (col if col.dtype == dtype else col.cast(dtype)).alias(name)
            for name, dtype in schema.items()
            for col in (cols[name],)
        ]
    )


def chunk_frames(path: str, p: Partition, exact: bool) -> dict[str, pl.DataFrame]:
    """Every table's frame for one chunk.

    All are built before any is kept: a table late in the chunk may ask for
    the chunk to be decoded again (:class:`NeedsExactTime`), and frames kept
    from the first try would then be counted twice.
    """
    builders: dict[str, Callable[[], dict[str, pl.Series]]] = {}
    if p.host:
        builders["host"] = lambda: host_frame(p.host, p.host_kind, exact)
    if p.device:
        builders["device"] = lambda: device_frame(p.device, p.device_kind, exact)
    if p.memory:
        builders["memory"] = lambda: memory_frame(p.memory, exact)
    if p.flows:
        builders["flows"] = lambda: flow_frame(p.flows, exact)
    if p.meta:
        builders["threads"] = lambda: thread_frame(p.meta)
        builders["processes"] = lambda: process_frame(p.meta)
    if p.counters:
        builders["counters"] = lambda: counter_frame(p.counters, exact)
    frames = {table: _frame(path, table, build) for table, build in builders.items()}
    return {table: frame for table, frame in frames.items() if frame.height}


def _concat(parts: dict[str, list[pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    out = {}
    for name, schema in TABLES.items():
        frames = parts[name]
        # No rechunk: a copy of every table at its largest moment is
        # exactly the peak this module exists to avoid.
        out[name] = pl.concat(frames, how="vertical", rechunk=False) if frames else pl.DataFrame(schema=schema)
    out["threads"] = out["threads"].unique(maintain_order=True)
    return out


def check_end(path: str, table: str, frame: pl.DataFrame) -> None:
    """``ts + dur`` must fit int64 too, or every end time computed later wraps."""
    if frame.height == 0:
        return
    bad = frame.filter(pl.col("ts") > INT64_MAX - pl.col("dur"))
    if bad.height:
        ts, dur = bad["ts"][0], bad["dur"][0]
        raise TraceError(
            path, f"end time of an event in the {table} events (ts {ts} ns + dur {dur} ns) is out of range (does not fit 64 bits)"
        )


def decode_events(path: str, chunks: Iterable[ChunkSource]) -> Decoded:
    """Decode every chunk into the per-table frames, joined (:func:`decoded_chunks`)."""
    parts: dict[str, list[pl.DataFrame]] = {name: [] for name in TABLES}
    skipped: Counter[str] = Counter()
    for frames in decoded_chunks(path, chunks, skipped):
        for table, frame in frames.items():
            parts[table].append(frame)
    return finish_tables(path, parts, skipped)


def decoded_chunks(path: str, chunks: Iterable[ChunkSource], skipped: Counter[str]) -> Iterator[dict[str, pl.DataFrame]]:
    """Each chunk's per-table frames, in file order; the events left out are
    counted in ``skipped``.  Raises :class:`TraceError` at the end for events
    without a usable duration.

    Each chunk is first decoded with float timestamps; a chunk holding
    epoch-scale float microseconds (beyond float64's nanosecond precision) is
    decoded again keeping the timestamp text, and so are all later chunks,
    since a file has one time base.
    """
    exact = False
    missing_dur = negative_dur = 0
    for chunk in chunks:
        p = partition(chunk(exact))
        missing_dur += p.missing_dur
        negative_dur += p.negative_dur
        if missing_dur or negative_dur:
            break
        try:
            frames = chunk_frames(path, p, exact)
        except NeedsExactTime:
            exact = True
            p = partition(chunk(exact))
            frames = chunk_frames(path, p, exact)
        skipped.update(p.skipped)
        yield frames
    if negative_dur:
        raise TraceError(path, f"{negative_dur} event(s) have a negative duration ('dur' < 0)")
    if missing_dur:
        raise TraceError(path, f"{missing_dur} complete ('X') event(s) have no duration ('dur')")


def finish_tables(path: str, parts: dict[str, list[pl.DataFrame]], skipped: Counter[str] | None = None) -> Decoded:
    """The chunks' frames, in file order, joined into one frame per table and
    checked; the events skipped on the way become counted warnings."""
    tables = _concat(parts)
    check_end(path, "host", tables["host"])
    check_end(path, "device", tables["device"])
    skipped = Counter(skipped or {})
    if not any(tables[name].height for name in TIMED_TABLES):
        raise no_usable_events(path, skipped)
    return Decoded(tables, skipped_warnings(skipped))


def no_usable_events(path: str, skipped: Counter[str]) -> TraceError:
    """The error for a file none of whose events carry a time, with why each was left out."""
    why = "; ".join(f"{reason}: {n:,}" for reason, n in skipped.items()) or "no complete ('X'), memory or counter event"
    return TraceError(path, f"no usable events ({why})")
