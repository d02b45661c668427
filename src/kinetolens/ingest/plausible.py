"""Values no real trace holds, dropped with a counted warning instead of used.

A null, zero or negative timestamp in an epoch-timed trace, or an end time
of 2**63-1, fits every column type, yet one such event stretches the
trace's span to years and every utilization figure with it.  A device with
-4 SMs or -1 bytes of memory would divide into negative occupancies.  The
readers keep what is plausible and count what they left out.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from kinetolens.errors import TraceError, TraceWarning
from kinetolens.ingest.kineto import RawTables

#: How far from the trace's median time an event may lie, and how long it
#: may last: a profile covers seconds to minutes (hours at most).
PLAUSIBLE_SPAN_NS = 86_400 * 10**9
FAR_OFF = "events timed more than a day from the rest of the trace, or lasting more than a day, skipped"
TIMED_TABLES = ("host", "device", "memory", "counters")

#: deviceProperties entries that are counts or sizes, so positive, and their upper bounds.
_POSITIVE_PROPERTIES: dict[str, float] = {
    "totalGlobalMem": 2**50,
    "numSms": 100_000,
    "warpSize": 1024,
    "maxThreadsPerBlock": 2**20,
    "maxThreadsPerMultiprocessor": 2**20,
    "regsPerBlock": 2**30,
    "regsPerMultiprocessor": 2**30,
    "sharedMemPerBlock": 2**40,
    "sharedMemPerMultiprocessor": 2**40,
    "sharedMemPerBlockOptin": 2**40,
    "clockRate": 2**40,
    "memoryBandwidth": 2**60,
    "l2CacheSize": 2**40,
}
_NON_NEGATIVE_PROPERTIES = ("computeMajor", "computeMinor")


def _shown(name: Any) -> str:
    if not isinstance(name, str):
        return ""
    return repr(name[:60] + "..." if len(name) > 60 else name) + " "


def drop_far_off_events(raw: RawTables, path: str) -> RawTables:
    """``raw`` without the events timed far from the rest (in place), counted.

    "Far" is more than :data:`PLAUSIBLE_SPAN_NS` from the median start of
    the trace's ranges, or a range longer than that.  The median is robust:
    however wild some timestamps, at most half the events can be dropped;
    when every event would be, the file is rejected.
    """
    starts = pl.concat([raw.host["ts"], raw.device["ts"]]).drop_nulls()
    if starts.len() == 0:
        return raw
    mid = int(starts.median())  # type: ignore[arg-type]
    dropped, example, kept = 0, "", 0
    for name in TIMED_TABLES:
        frame: pl.DataFrame = getattr(raw, name)
        if frame.height == 0:
            continue
        inside = plausible(mid, "dur" in frame.columns)
        far = frame.filter(~inside)
        if far.height:
            dropped += far.height
            example = example or far_off_example(name, far.row(0, named=True), mid)
            frame = frame.filter(inside)
            setattr(raw, name, frame)
        kept += frame.height
    if dropped:
        raw.warnings.append(far_off_warning(path, dropped, kept, example))
    return raw


def plausible(median_start: int, ranges: bool) -> pl.Expr:
    """Whether an event is timed within :data:`PLAUSIBLE_SPAN_NS` of the trace's
    median start (``ranges``: and lasts less than that)."""
    lo, hi = median_start - PLAUSIBLE_SPAN_NS, median_start + PLAUSIBLE_SPAN_NS
    inside = pl.col("ts").is_between(lo, hi)
    if ranges:
        inside = inside & pl.col("dur").is_between(0, PLAUSIBLE_SPAN_NS) & (pl.col("ts") <= hi - pl.col("dur"))
    return inside.fill_null(False)


def far_off_example(table: str, row: dict[str, Any], median_start: int) -> str:
    """The first far-off event, in words, for :func:`far_off_warning`."""
    dur = f", dur {row['dur']:,} ns" if row.get("dur") is not None else ""
    ts = f"{row['ts']:,} ns" if row.get("ts") is not None else "null"
    return f" (first: a {table} event {_shown(row.get('name'))}at ts {ts}{dur}; the trace's median start is {median_start:,} ns)"


def far_off_warning(path: str, dropped: int, kept: int, example: str) -> TraceWarning:
    """The counted warning for ``dropped`` far-off events; :class:`TraceError` when none is left."""
    if not kept:
        raise TraceError(path, f"no event is timed plausibly ({dropped:,} {FAR_OFF}{example})")
    return TraceWarning("events skipped", dropped, FAR_OFF + example)


def _plausible(key: str, value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    if key in _NON_NEGATIVE_PROPERTIES:
        return 0 <= value < 1000
    return 0 < value <= _POSITIVE_PROPERTIES[key]


def plausible_devices(devices: Any) -> tuple[list[dict[str, Any]], TraceWarning | None]:
    """``deviceProperties`` with impossible counts and sizes removed, and a warning naming them."""
    if not isinstance(devices, list):
        return [], None if devices is None else TraceWarning(
            "device properties dropped", 1, f"deviceProperties is a {type(devices).__name__}, not a list"
        )
    out: list[dict[str, Any]] = []
    bad: list[str] = []
    for device in devices:
        if not isinstance(device, dict):
            bad.append(f"an entry that is a {type(device).__name__}")
            continue
        clean = dict(device)
        for key in (*_POSITIVE_PROPERTIES, *_NON_NEGATIVE_PROPERTIES):
            if key in clean and not _plausible(key, clean[key]):
                bad.append(f"{key}={clean.pop(key)!r}")
        out.append(clean)
    if not bad:
        return out, None
    shown = ", ".join(bad[:4]) + (", ..." if len(bad) > 4 else "")
    return out, TraceWarning("device properties dropped", len(bad), f"impossible values ignored: {shown}")


#: Largest rank or world size taken from a trace's ``distributedInfo``.
MAX_RANKS = 1 << 24


def check_distributed_info(raw: RawTables) -> RawTables:
    """``raw`` without a ``distributedInfo`` rank or world size no job can have (in place)."""
    info = raw.metadata.get("distributedInfo")
    if not isinstance(info, dict):
        return raw
    bad = []
    for key, low in (("rank", 0), ("world_size", 1)):
        value = info.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value < MAX_RANKS):
            bad.append(f"{key}={info.pop(key)!r}")
    if bad:
        raw.metadata["distributedInfo"] = info
        raw.warnings.append(TraceWarning("distributed info dropped", len(bad), f"impossible values ignored: {', '.join(bad)}"))
    return raw


def check_device_properties(raw: RawTables) -> RawTables:
    """``raw`` with its metadata's ``deviceProperties`` made plausible (in place)."""
    if "deviceProperties" not in raw.metadata:
        return raw
    devices, warning = plausible_devices(raw.metadata["deviceProperties"])
    raw.metadata["deviceProperties"] = devices
    if warning is not None:
        raw.warnings.append(warning)
    return raw
