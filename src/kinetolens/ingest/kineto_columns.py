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

from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from operator import attrgetter, itemgetter
from typing import Any, Callable, Sequence

import msgspec
import polars as pl

from kinetolens.errors import TraceError
from kinetolens.ingest.categories import classify
from kinetolens.ingest.kineto_schema import Args, Event

INT64_MAX = (1 << 63) - 1
# Beyond this many microseconds a float64 cannot carry nanosecond digits.
FLOAT_EXACT_US = float(1 << 53) / 1000.0
MAX_TS_US = INT64_MAX / 1000.0
_MAX_INT_US = INT64_MAX // 1000

NO_ARGS = Args()
_classify = lru_cache(maxsize=256)(classify)


class NeedsExactTime(Exception):
    """A float timestamp too large for float64 nanoseconds: decode its text."""


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
            else:
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
            p.flows.append(e)
        elif ph == "M":
            p.meta.append(e)
        elif ph == "C":
            p.counters.append(e)
    return p


# -- single columns -----------------------------------------------------------


def _get(field: str, objs: Sequence[Any]) -> list[Any]:
    return list(map(attrgetter(field), objs))


def _args(events: Sequence[Event]) -> list[Args]:
    return [e.args or NO_ARGS for e in events]


def as_int(value: int | str | None) -> int | None:
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


def _ints(values: list[Any], convert: Callable[[Any], int | None] | None = None) -> pl.Series:
    """An Int64 column; values that are not plain ints go through ``convert``.

    A value that still does not fit (an id beyond 64 bits) raises the
    ``TypeError`` that the caller turns into a one-line error.
    """
    try:
        return pl.Series(values, dtype=pl.Int64, strict=True)
    except TypeError:
        if convert is None:
            raise
        return pl.Series(list(map(convert, values)), dtype=pl.Int64, strict=True)


def us_to_ns(value: int | float | None) -> int | None:
    """Microseconds (int or float) to integer nanoseconds, per value."""
    if value is None:
        return None
    if isinstance(value, int):
        return value * 1000
    # An infinite value raises OverflowError here, which the column check
    # reports; a finite one near float64's limit becomes an exact huge int
    # that fails the Int64 column the same way.
    scaled = value * 1000.0
    return round(scaled) if scaled != float("inf") and scaled != -float("inf") else int(value) * 1000


def raw_us_to_ns(raw: msgspec.Raw) -> int | None:
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


def _times(values: list[Any], is_ts: bool) -> pl.Series:
    """Microsecond times to exact Int64 nanoseconds, vectorized when safe.

    Integers are scaled exactly.  Floats below ``FLOAT_EXACT_US`` round to the
    nearest nanosecond exactly as ``round(v * 1000.0)`` does (half to even).
    Larger float *timestamps* cannot be converted from a float64 at all: the
    caller re-decodes the chunk keeping their JSON text.
    """
    try:
        ints = pl.Series(values, dtype=pl.Int64, strict=True)
    except TypeError:
        ints = None
    if ints is not None:
        lo, hi = ints.min(), ints.max()
        if lo is None or (-_MAX_INT_US <= lo and hi <= _MAX_INT_US):  # type: ignore[operator]
            return ints * 1000
        return pl.Series(list(map(us_to_ns, values)), dtype=pl.Int64, strict=True)
    floats = pl.Series(values, dtype=pl.Float64, strict=False)
    top = floats.abs().max()
    if top is not None and top < FLOAT_EXACT_US:  # type: ignore[operator]
        return (floats * 1000.0).round(0, mode="half_to_even").cast(pl.Int64)
    if is_ts and any(isinstance(v, float) and abs(v) >= FLOAT_EXACT_US for v in values):
        raise NeedsExactTime
    return pl.Series(list(map(us_to_ns, values)), dtype=pl.Int64, strict=True)


def _texts(raws: list[msgspec.Raw]) -> pl.Series:
    """JSON texts (shapes, dtypes) as strings, absent ones null.

    One join in C and one split in polars instead of a Python call per
    value: NUL cannot occur in JSON text, so it separates the values.
    """
    if not raws:
        return pl.Series(dtype=pl.String)
    texts = pl.Series([b"\x00".join(raws).decode()]).str.split("\x00").explode()
    return texts.replace(["", "null"], None)


_NO_DIM3 = [None, None, None]


def _dim3(value: list[int] | str | None) -> list[int | None]:
    """A launch grid/block, written as a list or as a string like '[1, 2, 3]'."""
    if isinstance(value, str):
        parts = value.replace("[", " ").replace("]", " ").replace(",", " ").split()
        value = [int(p) for p in parts if p.isdigit()]
    if not value:
        return _NO_DIM3
    return (list(value) + _NO_DIM3)[:3]


def _triple(values: list[Any], prefix: str) -> dict[str, pl.Series]:
    dims = [v if type(v) is list and len(v) == 3 else _dim3(v) for v in values]
    return {
        f"{prefix}_{axis}": pl.Series(list(map(itemgetter(i), dims)), dtype=pl.Int64, strict=True)
        for i, axis in enumerate("xyz")
    }


def _coalesce(a: pl.Series, b: pl.Series) -> pl.Series:
    if b.null_count() == len(b):
        return a
    return pl.select(pl.coalesce(pl.lit(a), pl.lit(b))).to_series()


# -- tables -------------------------------------------------------------------


class ColumnError(Exception):
    """A column's values do not fit its type; carries what to report."""

    def __init__(self, column: str, values: list[Any]) -> None:
        self.column = column
        self.values = values


def _column(name: str, build: Callable[[], pl.Series], values: list[Any]) -> pl.Series:
    try:
        return build().alias(name)
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        raise ColumnError(name, values) from None


def _common(events: list[Event], ts_exact: bool) -> dict[str, pl.Series]:
    pids, tids, tss = _get("pid", events), _get("tid", events), _get("ts", events)
    if ts_exact:
        ns = list(map(raw_us_to_ns, tss))
        in_us = [Decimal(n).scaleb(-3) for n in ns if n is not None and abs(n) > INT64_MAX]
        ts = _column("ts", lambda: pl.Series(ns, dtype=pl.Int64, strict=True), in_us)
    else:
        ts = _column("ts", lambda: _times(tss, True), tss)
    return {
        "pid": _column("pid", lambda: _ints(pids, as_int), pids),
        "tid": _column("tid", lambda: _ints(tids, as_int), tids),
        "ts": ts,
    }


def _int_args(args: list[Args], fields: dict[str, str]) -> dict[str, pl.Series]:
    out = {}
    for column, field in fields.items():
        values = _get(field, args)
        out[column] = _column(column, lambda v=values: _ints(v), values)
    return out


def host_frame(events: list[Event], kinds: list[str], ts_exact: bool) -> dict[str, pl.Series]:
    a = _args(events)
    durs = _get("dur", events)
    cols: dict[str, pl.Series] = {
        "kind": pl.Series(kinds, dtype=pl.String),
        "cat": pl.Series(_get("cat", events), dtype=pl.String),
        "name": pl.Series(_get("name", events), dtype=pl.String),
        **_common(events, ts_exact),
        "dur": _column("dur", lambda: _times(durs, False), durs),
    }
    ids = _int_args(a, {"external_id": "external_id", "external_id_legacy": "external_id_legacy"})
    cols["external_id"] = _coalesce(ids["external_id"], ids["external_id_legacy"]).alias("external_id")
    cols.update(
        _int_args(
            a,
            {
                "correlation": "correlation",
                "sequence_number": "sequence_number",
                "fwd_thread_id": "fwd_thread_id",
                "record_function_id": "record_function_id",
            },
        )
    )
    dims = _coalesce(_texts(_get("input_dims", a)), _texts(_get("input_dims_legacy", a)))
    cols["input_dims"] = dims.alias("input_dims")
    cols["input_types"] = _texts(_get("input_type", a)).alias("input_types")
    cols["concrete_inputs"] = _texts(_get("concrete_inputs", a)).alias("concrete_inputs")
    cols["call_stack"] = pl.Series("call_stack", _get("call_stack", a), dtype=pl.String)
    cols.update(
        _int_args(
            a,
            {
                "python_id": "python_id",
                "python_parent_id": "python_parent_id",
                "python_module_id": "python_module_id",
                "cbid": "cbid",
            },
        )
    )
    cols["collective_name"] = pl.Series("collective_name", _get("collective_name", a), dtype=pl.String)
    cols.update(
        _int_args(a, {"in_msg_nelems": "in_msg_nelems", "out_msg_nelems": "out_msg_nelems", "group_size": "group_size"})
    )
    cols["comm_dtype"] = pl.Series("comm_dtype", _get("comm_dtype", a), dtype=pl.String)
    cols["process_group_name"] = pl.Series("process_group_name", _get("process_group_name", a), dtype=pl.String)
    return cols


def device_frame(events: list[Event], kinds: list[str], ts_exact: bool) -> dict[str, pl.Series]:
    a = _args(events)
    durs = _get("dur", events)
    cols: dict[str, pl.Series] = {
        "kind": pl.Series(kinds, dtype=pl.String),
        "cat": pl.Series(_get("cat", events), dtype=pl.String),
        "name": pl.Series(_get("name", events), dtype=pl.String),
        **_common(events, ts_exact),
        "dur": _column("dur", lambda: _times(durs, False), durs),
    }
    cols.update(_int_args(a, {"device": "device", "stream": "stream", "context": "context", "correlation": "correlation"}))
    ids = _int_args(a, {"external_id": "external_id", "external_id_legacy": "external_id_legacy"})
    cols["external_id"] = _coalesce(ids["external_id"], ids["external_id_legacy"]).alias("external_id")
    cols.update(_int_args(a, {"queued": "queued"}))
    for axis in ("grid", "block"):
        values = _get(axis, a)
        try:
            cols.update(_triple(values, axis))
        except (TypeError, ValueError, pl.exceptions.PolarsError):
            raise ColumnError(axis, values) from None
    cols.update(_int_args(a, {"registers_per_thread": "registers_per_thread", "shared_memory": "shared_memory"}))
    for field in ("blocks_per_sm", "warps_per_sm"):
        cols[field] = pl.Series(field, _get(field, a), dtype=pl.Float64, strict=False)
    occ = pl.Series(_get("occupancy", a), dtype=pl.Float64, strict=False)
    theo = pl.Series(_get("theoretical_occupancy", a), dtype=pl.Float64, strict=False)
    cols["occupancy"] = _coalesce(occ, theo).alias("occupancy")
    cols.update(_int_args(a, {"bytes": "bytes"}))
    return cols


def memory_frame(events: list[Event], ts_exact: bool) -> dict[str, pl.Series]:
    a = _args(events)
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
        "id": _column("id", lambda: _ints(ids, _flow_id), ids),
        "pid": common["pid"],
        "tid": common["tid"],
        "ts": common["ts"],
    }


def thread_frame(meta: list[Event]) -> dict[str, pl.Series]:
    threads = [e for e in meta if e.name == "thread_name" and e.args]
    pids, tids = _get("pid", threads), _get("tid", threads)
    return {
        "pid": _column("pid", lambda: _ints(pids, as_int), pids),
        "tid": _column("tid", lambda: _ints(tids, as_int), tids),
        "name": pl.Series("name", _get("meta_name", _args(threads)), dtype=pl.String),
    }


def process_frame(meta: list[Event]) -> dict[str, pl.Series]:
    procs = [e for e in meta if e.name in ("process_name", "process_labels") and e.args]
    pids = _get("pid", procs)
    a = _args(procs)
    return {
        "pid": _column("pid", lambda: _ints(pids, as_int), pids),
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


def out_of_range_message(table: str, err: ColumnError) -> str:
    """Name the column and the value that did not fit (error path only)."""
    name = err.column
    is_time = name in ("ts", "dur")
    for v in err.values:
        if isinstance(v, float) and (v != v or abs(v) == float("inf")):
            return f"a '{name}' value in the {table} events is out of range (not a finite number)"
        if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
            continue
        exact = v if isinstance(v, Decimal) else Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
        limit = Decimal(MAX_TS_US) if is_time else Decimal(INT64_MAX)
        if abs(exact) > limit:
            shown = str(v) if isinstance(v, int) and len(str(v)) <= 24 else _short(exact)
            unit = " us" if is_time else ""
            return f"'{name}' value {shown}{unit} in the {table} events is out of range (does not fit 64 bits)"
    return f"a value of '{name}' in the {table} events does not fit its column"


def _short(value: Decimal) -> str:
    """``1.7e+306`` rather than 307 digits (or ``1.70000e+306``)."""
    text = f"{value:.6g}"
    mantissa, e, exponent = text.partition("e")
    if e and "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return mantissa + e + exponent


def check_fits(path: str, table: str, build: Callable[[], dict[str, pl.Series]]) -> dict[str, pl.Series]:
    """Run a frame builder, turning a misfit column into a one-line error."""
    try:
        return build()
    except ColumnError as err:
        raise TraceError(path, out_of_range_message(table, err)) from None
