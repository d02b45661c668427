"""Decode a Kineto (Chrome trace JSON) file into columnar polars tables.

Memory is bounded: the file is split once into a list of ``msgspec.Raw``
slices (one small object per event, pointing into the buffer), then decoded
into typed structs a chunk at a time and turned into columns.  No per-event
Python dict ever exists and at most one chunk of structs is alive.

Output tables (all times are integer nanoseconds, exact):

* ``host``: host-side ``X`` ranges (ops, annotations, python functions,
  runtime/driver calls, syncs);
* ``device``: device-side ``X`` events (kernels, memcpy, memset, GPU
  annotations, CUPTI profiler ranges);
* ``memory``: ``[memory]`` allocator instants;
* ``flows``: ``s``/``f``/``t`` flow events (``ac2g`` launch links, ``fwdbwd``);
* ``threads`` and ``processes``: names from metadata events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable

import msgspec
import polars as pl

from kinetolens.errors import TraceError, TraceWarning
from kinetolens.ingest.categories import classify
from kinetolens.ingest.kineto_schema import Event, ExactTimeEvent
from kinetolens.ingest.opener import OpenedFile

CHUNK_EVENTS = 8192
INT64_MAX = (1 << 63) - 1
# Beyond this many microseconds a float64 cannot carry nanosecond digits.
FLOAT_EXACT_US = float(1 << 53) / 1000.0
MAX_TS_US = INT64_MAX / 1000.0


class _Container(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw] | None = None  # noqa: N815 - the JSON key


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
    "collective_name": pl.String(),
    "in_msg_nelems": pl.Int64(),
    "out_msg_nelems": pl.Int64(),
    "group_size": pl.Int64(),
    "comm_dtype": pl.String(),
    "process_group_name": pl.String(),
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


def _as_int(value: int | str | None) -> int | None:
    """Thread and process ids: ints, numeric strings, or 'stream 7'."""
    if value is None or isinstance(value, int):
        return value
    text = value.strip()
    if text.isdigit():
        return int(text)
    head, _, tail = text.rpartition(" ")
    if head and tail.isdigit():
        return int(tail)
    return None


def _us_to_ns(value: int | float | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value * 1000
    try:
        return round(value * 1000.0)
    except OverflowError:
        # |value| near float64's limit makes value * 1000 inf.  Keep it an
        # exact (huge) int so the column check reports it as out of range.
        return int(value) * 1000


def _raw_us_to_ns(raw: msgspec.Raw) -> int | None:
    """Exact decimal-text microseconds to integer nanoseconds."""
    text = bytes(raw)
    if text == b"null":
        return None
    whole, dot, frac = text.partition(b".")
    if b"e" in text or b"E" in text:
        # Decimal, not float: exact, and 1e400 stays a (huge) number rather
        # than inf, so the column check reports it as out of range.
        return round(Decimal(text.decode()) * 1000)
    sign = -1 if whole.startswith(b"-") else 1
    ns = int(whole) * 1000
    if dot:
        digits = frac[:3].ljust(3, b"0")
        extra = frac[3:4]
        part = int(digits) + (1 if extra and extra >= b"5" else 0)
        ns += sign * part
    return ns


def _raw_text(raw: msgspec.Raw) -> str | None:
    text = bytes(raw)
    return None if not text or text == b"null" else text.decode()


def _first(*values: Any) -> Any:
    for v in values:
        if v is not None:
            return v
    return None


def _xyz(values: list[int] | str | None, i: int) -> int | None:
    """One dimension of a launch grid/block, written as a list or a string."""
    if isinstance(values, str):
        parts = [p for p in values.replace("[", " ").replace("]", " ").replace(",", " ").split()]
        values = [int(p) for p in parts if p.isdigit()]
    if values is None or len(values) <= i:
        return None
    return values[i]


class _ChunkDecoder:
    """Typed decoding of one chunk, with a per-event fallback for bad events.

    An event of the wrong shape is skipped and counted; a number too large
    for its type (``1e400``) is not: that is bad input, and skipping the
    event would silently change the totals.
    """

    def __init__(self, path: str, exact_time: bool) -> None:
        self.path = path
        self.exact_time = exact_time
        etype = ExactTimeEvent if exact_time else Event
        self._list = msgspec.json.Decoder(list[etype], strict=False)  # type: ignore[valid-type]
        self._one = msgspec.json.Decoder(etype, strict=False)
        self.bad_events = 0
        self.first_bad: str = ""

    def decode(self, raws: list[msgspec.Raw], first_index: int = 0) -> list[Event]:
        try:
            return self._list.decode(b"[" + b",".join(raws) + b"]")
        except msgspec.DecodeError:
            pass
        events: list[Event] = []
        for i, raw in enumerate(raws):
            try:
                events.append(self._one.decode(raw))
            except msgspec.DecodeError as exc:
                if "out of range" in str(exc):
                    where = str(exc).rpartition(" - at ")[2]
                    raise TraceError(
                        self.path, f"number out of range at {where} in traceEvents[{first_index + i}]"
                    ) from None
                self.bad_events += 1
                if not self.first_bad:
                    self.first_bad = str(exc)
        return events


class _Columns:
    """Column builders for every table, filled chunk by chunk."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.frames: dict[str, list[pl.DataFrame]] = {
            k: [] for k in ("host", "device", "memory", "flows", "threads", "processes", "counters")
        }

    def add(self, table: str, cols: dict[str, list[Any]], schema: dict[str, pl.DataType]) -> None:
        if not cols or not next(iter(cols.values())):
            return
        try:
            frame = pl.DataFrame(cols, schema=schema, strict=True)
        except (OverflowError, TypeError, pl.exceptions.PolarsError) as exc:
            raise TraceError(self.path, _misfit(table, cols, schema, exc)) from None
        self.frames[table].append(frame)

    def concat(self, table: str, schema: dict[str, pl.DataType]) -> pl.DataFrame:
        parts = self.frames[table]
        if not parts:
            return pl.DataFrame(schema=schema)
        return pl.concat(parts, how="vertical")


def _misfit(table: str, cols: dict[str, list[Any]], schema: dict[str, pl.DataType], exc: Exception) -> str:
    """Name the column and value that did not fit (error path only)."""
    for name, values in cols.items():
        if schema[name] == pl.Int64():
            for v in values:
                if isinstance(v, int) and not (-INT64_MAX - 1 <= v <= INT64_MAX):
                    if name in ("ts", "dur"):  # back to the file's microseconds
                        shown = f"{_short(Decimal(v).scaleb(-3))} us"
                    else:
                        shown = str(v) if len(str(v)) <= 24 else _short(Decimal(v))
                    return f"'{name}' value {shown} in the {table} events is out of range (does not fit 64 bits)"
    return f"a value in the {table} events does not fit its column ({_first_line(exc)})"


def _short(value: Decimal) -> str:
    """``1.7e+306`` rather than 307 digits (or ``1.70000e+306``)."""
    text = f"{value:.6g}"
    mantissa, e, exponent = text.partition("e")
    if e and "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return mantissa + e + exponent


def _check_end(path: str, table: str, frame: pl.DataFrame) -> None:
    """``ts + dur`` must fit int64 too, or every end time computed later wraps."""
    if frame.height == 0:
        return
    bad = frame.filter(pl.col("ts") > INT64_MAX - pl.col("dur"))
    if bad.height:
        ts, dur = bad["ts"][0], bad["dur"][0]
        raise TraceError(
            path, f"end time of an event in the {table} events (ts {ts} ns + dur {dur} ns) is out of range (does not fit 64 bits)"
        )


def _check_ids(path: str, name: str, values: Iterable[int | None]) -> None:
    for v in values:
        if v is not None and not (-INT64_MAX - 1 <= v <= INT64_MAX):
            raise TraceError(path, f"value {v} of '{name}' is out of range for a 64-bit id")


def decode_events(
    path: str, raw_events: list[msgspec.Raw], exact_time: bool
) -> tuple[dict[str, pl.DataFrame], list[TraceWarning]]:
    decoder = _ChunkDecoder(path, exact_time)
    out = _Columns(path)
    to_ns = _raw_us_to_ns if exact_time else _us_to_ns
    missing_dur = 0
    negative_dur = 0
    for start in range(0, len(raw_events), CHUNK_EVENTS):
        chunk = decoder.decode(raw_events[start : start + CHUNK_EVENTS], start)
        host: list[Event] = []
        host_kind: list[str] = []
        device: list[Event] = []
        device_kind: list[str] = []
        memory: list[Event] = []
        flows: list[Event] = []
        meta: list[Event] = []
        counters: list[Event] = []
        for e in chunk:
            ph = e.ph
            if ph == "X":
                if e.dur is None:
                    missing_dur += 1
                    continue
                if e.dur < 0:
                    negative_dur += 1
                    continue
                on_device, kind = classify(e.cat)
                if on_device:
                    device.append(e)
                    device_kind.append(kind)
                else:
                    host.append(e)
                    host_kind.append(kind)
            elif ph in ("i", "I"):
                if e.name == "[memory]":
                    memory.append(e)
            elif ph in ("s", "f", "t"):
                flows.append(e)
            elif ph == "M":
                meta.append(e)
            elif ph == "C":
                counters.append(e)
        if negative_dur or missing_dur:
            break
        if host:
            a = [e.args for e in host]
            out.add(
                "host",
                {
                    "kind": host_kind,
                    "cat": [e.cat for e in host],
                    "name": [e.name for e in host],
                    "pid": [_as_int(e.pid) for e in host],
                    "tid": [_as_int(e.tid) for e in host],
                    "ts": [to_ns(e.ts) for e in host],  # type: ignore[arg-type]
                    "dur": [_us_to_ns(e.dur) for e in host],
                    "external_id": [x and _first(x.external_id, x.external_id_legacy) for x in a],
                    "correlation": [x and x.correlation for x in a],
                    "sequence_number": [x and x.sequence_number for x in a],
                    "fwd_thread_id": [x and x.fwd_thread_id for x in a],
                    "record_function_id": [x and x.record_function_id for x in a],
                    "input_dims": [x and _raw_text(x.input_dims or x.input_dims_legacy) for x in a],
                    "input_types": [x and _raw_text(x.input_type) for x in a],
                    "concrete_inputs": [x and _raw_text(x.concrete_inputs) for x in a],
                    "call_stack": [x and x.call_stack for x in a],
                    "python_id": [x and x.python_id for x in a],
                    "python_parent_id": [x and x.python_parent_id for x in a],
                    "python_module_id": [x and x.python_module_id for x in a],
                    "cbid": [x and x.cbid for x in a],
                    "collective_name": [x and x.collective_name for x in a],
                    "in_msg_nelems": [x and x.in_msg_nelems for x in a],
                    "out_msg_nelems": [x and x.out_msg_nelems for x in a],
                    "group_size": [x and x.group_size for x in a],
                    "comm_dtype": [x and x.comm_dtype for x in a],
                    "process_group_name": [x and x.process_group_name for x in a],
                },
                HOST_SCHEMA,
            )
        if device:
            a = [e.args for e in device]
            out.add(
                "device",
                {
                    "kind": device_kind,
                    "cat": [e.cat for e in device],
                    "name": [e.name for e in device],
                    "pid": [_as_int(e.pid) for e in device],
                    "tid": [_as_int(e.tid) for e in device],
                    "ts": [to_ns(e.ts) for e in device],  # type: ignore[arg-type]
                    "dur": [_us_to_ns(e.dur) for e in device],
                    "device": [x and x.device for x in a],
                    "stream": [x and x.stream for x in a],
                    "context": [x and x.context for x in a],
                    "correlation": [x and x.correlation for x in a],
                    "external_id": [x and _first(x.external_id, x.external_id_legacy) for x in a],
                    "queued": [x and x.queued for x in a],
                    "grid_x": [x and _xyz(x.grid, 0) for x in a],
                    "grid_y": [x and _xyz(x.grid, 1) for x in a],
                    "grid_z": [x and _xyz(x.grid, 2) for x in a],
                    "block_x": [x and _xyz(x.block, 0) for x in a],
                    "block_y": [x and _xyz(x.block, 1) for x in a],
                    "block_z": [x and _xyz(x.block, 2) for x in a],
                    "registers_per_thread": [x and x.registers_per_thread for x in a],
                    "shared_memory": [x and x.shared_memory for x in a],
                    "blocks_per_sm": [x and x.blocks_per_sm for x in a],
                    "warps_per_sm": [x and x.warps_per_sm for x in a],
                    "occupancy": [x and _first(x.occupancy, x.theoretical_occupancy) for x in a],
                    "bytes": [x and x.bytes for x in a],
                },
                DEVICE_SCHEMA,
            )
        if memory:
            a = [e.args for e in memory]
            out.add(
                "memory",
                {
                    "pid": [_as_int(e.pid) for e in memory],
                    "tid": [_as_int(e.tid) for e in memory],
                    "ts": [to_ns(e.ts) for e in memory],  # type: ignore[arg-type]
                    "device_type": [x and x.device_type for x in a],
                    "device_id": [x and x.device_id for x in a],
                    "addr": [x and x.addr for x in a],
                    "bytes": [x and x.alloc_bytes for x in a],
                    "total_allocated": [x and x.total_allocated for x in a],
                    "total_reserved": [x and x.total_reserved for x in a],
                },
                MEMORY_SCHEMA,
            )
        if flows:
            ids = [_as_int(e.id) if not isinstance(e.id, str) else _flow_id(e.id) for e in flows]
            _check_ids(path, "id", ids)
            out.add(
                "flows",
                {
                    "ph": [e.ph for e in flows],
                    "cat": [e.cat for e in flows],
                    "id": ids,
                    "pid": [_as_int(e.pid) for e in flows],
                    "tid": [_as_int(e.tid) for e in flows],
                    "ts": [to_ns(e.ts) for e in flows],  # type: ignore[arg-type]
                },
                FLOW_SCHEMA,
            )
        if meta:
            threads = [e for e in meta if e.name == "thread_name" and e.args]
            procs = [e for e in meta if e.name in ("process_name", "process_labels") and e.args]
            out.add(
                "threads",
                {
                    "pid": [_as_int(e.pid) for e in threads],
                    "tid": [_as_int(e.tid) for e in threads],
                    "name": [e.args.meta_name for e in threads],  # type: ignore[union-attr]
                },
                THREAD_SCHEMA,
            )
            out.add(
                "processes",
                {
                    "pid": [_as_int(e.pid) for e in procs],
                    "name": [e.args.meta_name for e in procs],  # type: ignore[union-attr]
                    "labels": [e.args.labels for e in procs],  # type: ignore[union-attr]
                },
                PROCESS_SCHEMA,
            )
        if counters:
            out.add(
                "counters",
                {
                    "pid": [_as_int(e.pid) for e in counters],
                    "ts": [to_ns(e.ts) for e in counters],  # type: ignore[arg-type]
                    "name": [e.name for e in counters],
                    "args": [None for _ in counters],
                },
                COUNTER_SCHEMA,
            )
    if negative_dur:
        raise TraceError(path, f"{negative_dur} event(s) have a negative duration ('dur' < 0)")
    if missing_dur:
        raise TraceError(path, f"{missing_dur} complete ('X') event(s) have no duration ('dur')")
    warnings: list[TraceWarning] = []
    if decoder.bad_events:
        if decoder.bad_events == len(raw_events):
            raise TraceError(path, f"no event could be decoded ({decoder.first_bad})")
        warnings.append(
            TraceWarning("malformed events skipped", decoder.bad_events, decoder.first_bad)
        )
    tables = {
        "host": out.concat("host", HOST_SCHEMA),
        "device": out.concat("device", DEVICE_SCHEMA),
        "memory": out.concat("memory", MEMORY_SCHEMA),
        "flows": out.concat("flows", FLOW_SCHEMA),
        "threads": out.concat("threads", THREAD_SCHEMA).unique(maintain_order=True),
        "processes": out.concat("processes", PROCESS_SCHEMA),
        "counters": out.concat("counters", COUNTER_SCHEMA),
    }
    _check_end(path, "host", tables["host"])
    _check_end(path, "device", tables["device"])
    return tables, warnings


def _flow_id(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
