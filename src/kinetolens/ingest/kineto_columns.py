"""One chunk of decoded Kineto events to columnar polars frames.

This is the hot loop of ingest, so the per-event Python work is kept to a
single partitioning pass; every column is then pulled out with
``map(attrgetter(...))`` (C speed, no Python frame per value) and converted
by polars in one call.  Conversions that would otherwise need a Python
function per value (microseconds to nanoseconds, grid/block triples, the
legacy spellings of ``External id``) are done on whole columns; the
per-value fallbacks only run on chunks that need them (string pids in old
traces, ints beyond 64 bits, epoch-scale float timestamps).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from decimal import Decimal
from functools import lru_cache
from itertools import compress
from operator import attrgetter
from typing import Any

import msgspec
import polars as pl

from kinetolens.formats import LAUNCH_FLOW_CAT
from kinetolens.ingest.categories import PYTHON, RUNTIME, SYNC, classify
from kinetolens.ingest.kineto_schema import (
    NO_ARGS,
    DeviceArgs,
    Event,
    HostArgs,
    MemoryArgs,
    MetaArgs,
    PythonArgs,
    RuntimeArgs,
)
from kinetolens.ingest.kineto_values import (
    INT64_MAX,
    ColumnError,
    as_int,
    coalesce,
    column,
    exact_times,
    ints,
    nulls,
    raw_us_to_ns,
    shared_texts,
    texts,
    times,
    triple,
)
from kinetolens.ingest.text_repair import is_text_error

_classify = lru_cache(maxsize=256)(classify)


@dataclass
class Partition:
    """The events of one chunk, split by what table they go to."""

    host: list[Event]
    host_kind: list[str]
    device: list[Event]
    device_kind: list[str]
    memory: list[Event]
    flows: list[Event]
    meta: list[Event]
    counters: list[Event]
    missing_dur: int = 0
    negative_dur: int = 0
    #: Events left out, by reason (each becomes a counted load warning).
    skipped: Counter[str] = dataclass_field(default_factory=Counter)


NO_PHASE = "events without a phase ('ph') skipped"
NO_TS = "complete ('X') events without a timestamp ('ts') skipped"
NO_CAT = "complete ('X') events without a category ('cat') kept as other host ranges (not ops, kernels or runtime calls)"
#: A missing or null ``ts`` of an exact-time event (kept as JSON text).
_NULL_TEXT = msgspec.Raw(b"null")


def partition(events: Sequence[Event]) -> Partition:
    """Route each event by phase (and category for ``X`` events)."""
    p = Partition([], [], [], [], [], [], [], [])
    host, host_kind, device, device_kind = p.host, p.host_kind, p.device, p.device_kind
    for e in events:
        ph = e.ph
        if ph == "X":
            dur = e.dur
            if dur is None:
                p.missing_dur += 1
            elif dur < 0:
                p.negative_dur += 1
            elif e.ts is None or e.ts == _NULL_TEXT:
                p.skipped[NO_TS] += 1
            else:
                if e.cat is None:
                    p.skipped[NO_CAT] += 1
                on_device, kind = _classify(e.cat)
                if on_device:
                    device.append(e)
                    device_kind.append(kind)
                else:
                    host.append(e)
                    host_kind.append(kind)
        elif ph == "i" or ph == "I":
            if e.name == "[memory]":
                p.memory.append(e)
        elif ph == "s" or ph == "f" or ph == "t":
            # Launch arrows carry the launch's correlation id, which the
            # device events hold themselves: not kept (two rows per kernel).
            if e.cat != LAUNCH_FLOW_CAT:
                p.flows.append(e)
        elif ph == "M":
            p.meta.append(e)
        elif ph == "C":
            p.counters.append(e)
        elif not ph:
            p.skipped[NO_PHASE] += 1
        else:
            p.skipped[f"events of phase '{ph[:8]}' (not read by kinetolens) skipped"] += 1
    return p


# -- single columns -----------------------------------------------------------


def _get(field: str, objs: Sequence[Any]) -> list[Any]:
    return list(map(attrgetter(field), objs))


class ArgsInvalid(ValueError):
    """An event's ``args`` do not decode as its table's args struct.

    The streaming readers then step aside; the whole-file reader finds and
    skips the events concerned (:func:`invalid_args`), counting them.
    """


def _args_decoder(struct: type[msgspec.Struct]) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(list[struct], strict=False)  # type: ignore[valid-type]


ARGS_STRUCTS: dict[str, type[msgspec.Struct]] = {
    "host": HostArgs,
    "runtime": RuntimeArgs,
    "python": PythonArgs,
    "device": DeviceArgs,
    "memory": MemoryArgs,
    "meta": MetaArgs,
}
#: Each table's decoder for a JSON array of its args structs.
ARGS_DECODERS = {table: _args_decoder(struct) for table, struct in ARGS_STRUCTS.items()}
_ONE_ARGS = {table: msgspec.json.Decoder(struct, strict=False) for table, struct in ARGS_STRUCTS.items()}


def _args(events: Sequence[Event], table: str) -> list[Any]:
    """The args of ``events``, decoded in one call as ``table``'s struct."""
    return _decoded_args(_args_text(events), table)


def _args_text(events: Sequence[Event]) -> bytes:
    """The args of ``events`` as one JSON array."""
    return b"".join((b"[", b",".join(_get("args", events)), b"]"))


def _decoded_args(text: bytes, table: str) -> list[Any]:
    try:
        return ARGS_DECODERS[table].decode(text)  # type: ignore[no-any-return]
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise ArgsInvalid(str(exc)) from None


#: Each args struct's fields and the JSON keys they are read from, quoted.
_ARGS_KEYS = {
    table: tuple(zip(struct.__struct_fields__, (f'"{k}"'.encode() for k in struct.__struct_encode_fields__), strict=True))
    for table, struct in ARGS_STRUCTS.items()
}


def fields_in(text: bytes, table: str) -> frozenset[str]:
    """The fields of ``table``'s args struct whose key occurs in ``text`` (the
    args as JSON): a field whose key does not is null on every event, and its
    column is made without reading the field of each.  Text with ``\\u``
    escapes may spell a key otherwise: then every field is read."""
    if b"\\u" in text:
        return frozenset(field for field, _ in _ARGS_KEYS[table])
    return frozenset(field for field, key in _ARGS_KEYS[table] if key in text)


def table_of(e: Event) -> str | None:
    """The table whose args struct ``e``'s args must fit (None: args unread)."""
    if e.ph == "X":
        return "device" if _classify(e.cat)[0] else "host"
    if e.ph in ("i", "I") and e.name == "[memory]":
        return "memory"
    return "meta" if e.ph == "M" else None


def invalid_args(events: Sequence[Event]) -> tuple[list[int], str]:
    """Positions of the events whose args do not fit their table, and the first error.

    Event by event, for the whole-file reader only.  ``"args": null`` means
    no args and is replaced by an empty object.
    """
    bad: list[int] = []
    first = ""
    for i, e in enumerate(events):
        table = table_of(e)
        if table is None or e.args is NO_ARGS:
            continue
        if bytes(e.args).strip() == b"null":
            e.args = NO_ARGS
            continue
        try:
            _ONE_ARGS[table].decode(e.args)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            if is_text_error(exc):
                raise  # the reader replaces such text and decodes again
            bad.append(i)
            first = first or str(exc).replace("`$", "`$.args")
    return bad, first


def _common(events: list[Event], ts_exact: bool) -> dict[str, pl.Series]:
    pids, tids, tss = _get("pid", events), _get("tid", events), _get("ts", events)
    if not ts_exact:
        ts = column("ts", lambda: times(tss, True), tss)
    elif (vectorized := exact_times(tss)) is not None:
        ts = vectorized
    else:
        ns = list(map(raw_us_to_ns, tss))
        in_us = [Decimal(n).scaleb(-3) for n in ns if n is not None and abs(n) > INT64_MAX]
        ts = column("ts", lambda: pl.Series(ns, dtype=pl.Int64, strict=True), in_us)
    return {
        "pid": column("pid", lambda: ints(pids, as_int), pids),
        "tid": column("tid", lambda: ints(tids, as_int), tids),
        "ts": ts,
    }


def _int_args(args: list[Any], fields: dict[str, str]) -> dict[str, pl.Series]:
    out = {}
    for name, field in fields.items():
        values = _get(field, args)
        out[name] = column(name, lambda v=values: ints(v), values)
    return out


def _range_columns(events: list[Event], kinds: list[str], ts_exact: bool, *, long_names: bool) -> dict[str, pl.Series]:
    """What every ``X`` range has, host or device: kind, name, where, when.

    ``long_names``: names are long and few (kernels: hundreds of bytes of
    C++ signature, repeated every step), so each distinct one is stored once.
    Host names are mostly short (kept inline in the column) and many; the
    lookup per event would cost more time than it saves memory.
    """
    durs = _get("dur", events)
    names = _get("name", events)
    return {
        "kind": pl.Series(kinds, dtype=pl.String),
        "cat": pl.Series(_get("cat", events), dtype=pl.String),
        "name": shared_texts(names) if long_names else pl.Series(names, dtype=pl.String),
        **_common(events, ts_exact),
        "dur": column("dur", lambda: times(durs, False), durs),
    }


#: Host ranges whose args are read with a struct of their own few fields
#: (the rest, ops and annotations, with ``HostArgs``).
_HOST_ARGS_OF_KIND = {RUNTIME: "runtime", SYNC: "runtime", PYTHON: "python"}


def host_frame(events: list[Event], kinds: list[str], ts_exact: bool) -> dict[str, pl.Series]:
    """The host table's columns for one chunk.

    Ops and annotations, runtime calls and Python frames carry different
    args; each group is read with a struct of its own fields (the fields a
    struct lacks are null columns) and the rows are put back in file order.
    """
    tables = [_HOST_ARGS_OF_KIND.get(kind, "host") for kind in kinds]
    present = set(tables)
    if len(present) <= 1:
        return _host_columns(events, kinds, ts_exact, next(iter(present), "host"))
    parts, rows = [], []
    for table in ("host", "runtime", "python"):
        if table in present:
            mask = [t == table for t in tables]
            rows.extend(compress(range(len(tables)), mask))
            parts.append(_host_columns(list(compress(events, mask)), list(compress(kinds, mask)), ts_exact, table))
    # Back to file order, so that the raw table does not depend on where a
    # reader cut its chunks.
    back = pl.Series(rows, dtype=pl.UInt32).arg_sort()
    ordered = pl.concat([pl.DataFrame(part) for part in parts]).select(pl.all().gather(back))
    return dict(zip(ordered.columns, ordered.get_columns(), strict=True))


def _host_columns(events: list[Event], kinds: list[str], ts_exact: bool, table: str) -> dict[str, pl.Series]:
    """Host columns of ranges whose args are read as ``table``'s struct;
    fields that struct does not have, or no event of the chunk has, are null columns."""
    text = _args_text(events)
    a = _decoded_args(text, table)
    has = fields_in(text, table)
    n = len(events)

    def int_args(*fields: str) -> dict[str, pl.Series]:
        """Int columns named as the struct's fields."""
        read = _int_args(a, {field: field for field in fields if field in has})
        return {field: read[field] if field in read else nulls(n, pl.Int64) for field in fields}

    def text_args(field: str, build: Callable[[list[Any]], pl.Series]) -> pl.Series:
        return build(_get(field, a)) if field in has else nulls(n, pl.String)

    cols = _range_columns(events, kinds, ts_exact, long_names=False)
    ids = int_args("external_id", "external_id_legacy")
    cols["external_id"] = coalesce(ids["external_id"], ids["external_id_legacy"]).alias("external_id")
    cols.update(int_args("correlation", "sequence_number", "fwd_thread_id", "record_function_id"))
    dims = coalesce(text_args("input_dims", texts), text_args("input_dims_legacy", texts))
    cols["input_dims"] = dims.alias("input_dims")
    cols["input_types"] = text_args("input_type", texts).alias("input_types")
    cols["concrete_inputs"] = text_args("concrete_inputs", texts).alias("concrete_inputs")
    cols["call_stack"] = text_args("call_stack", shared_texts).alias("call_stack")
    cols.update(int_args("python_id", "python_parent_id", "python_module_id", "cbid"))
    cols["kernel"] = text_args("kernel", _strings).alias("kernel")
    cols["collective_name"] = text_args("collective_name", _strings).alias("collective_name")
    cols.update(int_args("in_msg_nelems", "out_msg_nelems", "group_size"))
    cols["comm_dtype"] = text_args("comm_dtype", _strings).alias("comm_dtype")
    cols["process_group_name"] = text_args("process_group_name", _strings).alias("process_group_name")
    cols["process_group_desc"] = text_args("process_group_desc", _strings).alias("process_group_desc")
    cols["process_group_ranks"] = text_args("process_group_ranks", _strings).alias("process_group_ranks")
    cols.update(int_args("comm_seq"))
    return cols


def _strings(values: list[Any]) -> pl.Series:
    return pl.Series(values, dtype=pl.String)


def device_frame(events: list[Event], kinds: list[str], ts_exact: bool) -> dict[str, pl.Series]:
    a = _args(events, "device")
    cols = _range_columns(events, kinds, ts_exact, long_names=True)
    cols.update(_int_args(a, {"device": "device", "stream": "stream", "context": "context", "correlation": "correlation"}))
    ids = _int_args(a, {"external_id": "external_id", "external_id_legacy": "external_id_legacy"})
    cols["external_id"] = coalesce(ids["external_id"], ids["external_id_legacy"]).alias("external_id")
    cols.update(_int_args(a, {"queued": "queued"}))
    for axis in ("grid", "block"):
        values = _get(axis, a)
        try:
            cols.update(triple(values, axis))
        except (TypeError, ValueError, pl.exceptions.PolarsError):
            raise ColumnError(axis, values) from None
    cols.update(_int_args(a, {"registers_per_thread": "registers_per_thread", "shared_memory": "shared_memory"}))
    for field in ("blocks_per_sm", "warps_per_sm"):
        cols[field] = pl.Series(field, _get(field, a), dtype=pl.Float64, strict=False)
    occ = pl.Series(_get("occupancy", a), dtype=pl.Float64, strict=False)
    theo = pl.Series(_get("theoretical_occupancy", a), dtype=pl.Float64, strict=False)
    cols["occupancy"] = coalesce(occ, theo).alias("occupancy")
    sizes = _int_args(a, {"bytes": "bytes", "size": "size"})
    cols["bytes"] = coalesce(sizes["bytes"], sizes["size"]).alias("bytes")
    cols["memory_bw_gbps"] = pl.Series("memory_bw_gbps", _get("memory_bw_gbps", a), dtype=pl.Float64, strict=False)
    cols.update(_int_args(a, {"graph_id": "graph_id", "graph_node": "graph_node_id"}))
    return cols


def memory_frame(events: list[Event], ts_exact: bool) -> dict[str, pl.Series]:
    a = _args(events, "memory")
    return {
        **_common(events, ts_exact),
        **_int_args(
            a,
            {
                "device_type": "device_type",
                "device_id": "device_id",
                "addr": "addr",
                "bytes": "alloc_bytes",
                "total_allocated": "total_allocated",
                "total_reserved": "total_reserved",
            },
        ),
    }


def _flow_id(value: int | str | None) -> int | None:
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return None
    return value


def flow_frame(events: list[Event], ts_exact: bool) -> dict[str, pl.Series]:
    ids = _get("id", events)
    common = _common(events, ts_exact)
    return {
        "ph": pl.Series("ph", _get("ph", events), dtype=pl.String),
        "cat": pl.Series("cat", _get("cat", events), dtype=pl.String),
        "id": column("id", lambda: ints(ids, _flow_id), ids),
        "pid": common["pid"],
        "tid": common["tid"],
        "ts": common["ts"],
    }


def thread_frame(meta: list[Event]) -> dict[str, pl.Series]:
    threads = [e for e in meta if e.name == "thread_name" and e.args is not NO_ARGS]
    pids, tids = _get("pid", threads), _get("tid", threads)
    return {
        "pid": column("pid", lambda: ints(pids, as_int), pids),
        "tid": column("tid", lambda: ints(tids, as_int), tids),
        "name": pl.Series("name", _get("meta_name", _args(threads, "meta")), dtype=pl.String),
    }


def process_frame(meta: list[Event]) -> dict[str, pl.Series]:
    procs = [e for e in meta if e.name in ("process_name", "process_labels") and e.args is not NO_ARGS]
    pids = _get("pid", procs)
    a = _args(procs, "meta")
    return {
        "pid": column("pid", lambda: ints(pids, as_int), pids),
        "name": pl.Series("name", _get("meta_name", a), dtype=pl.String),
        "labels": pl.Series("labels", _get("labels", a), dtype=pl.String),
    }


def counter_frame(events: list[Event], ts_exact: bool) -> dict[str, pl.Series]:
    common = _common(events, ts_exact)
    return {
        "pid": common["pid"],
        "ts": common["ts"],
        "name": pl.Series("name", _get("name", events), dtype=pl.String),
        "args": pl.Series("args", [None] * len(events), dtype=pl.String),
    }


