"""Open a Kineto trace file: detect its layout, recover a truncated tail.

Layouts: the usual ``{"traceEvents": [...], ...metadata}`` object, and the
bare JSON array of events that 2020-era Kineto wrote (which torch-tb-profiler
and HTA both reject).
"""

from __future__ import annotations

from typing import Any

import msgspec

from kinetolens.errors import TraceError, TraceWarning
from kinetolens.ingest.kineto import FLOAT_EXACT_US, MAX_TS_US, RawTables, decode_events
from kinetolens.ingest.opener import OpenedFile

_MAX_RECOVERY_TRIES = 64
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_EVENTS = msgspec.json.Decoder(list[msgspec.Raw])


class _TsProbe(msgspec.Struct, gc=False):
    ts: int | float | None = None


_PROBE = msgspec.json.Decoder(list[_TsProbe], strict=False)


def _first_char(data: Any) -> bytes:
    view = memoryview(data)
    for i in range(min(len(view), 4096)):
        c = bytes(view[i : i + 1])
        if c not in b" \t\r\n\xef\xbb\xbf":
            return c
    return b""


def _describe_decode_error(exc: Exception) -> str:
    text = str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return f"invalid UTF-8 at byte {exc.start}"
    if "truncated" in text:
        return "JSON ends early (truncated file)"
    return text.replace("JSON is malformed: ", "invalid JSON: ")


def _recover_truncated(path: str, data: Any, legacy: bool) -> tuple[Any, int]:
    """Cut a truncated trace after its last complete event and close it.

    Returns the repaired buffer and how many bytes were dropped.  Only called
    on damaged files, so copying the prefix per attempt is acceptable.
    """
    view = memoryview(data)
    raw = bytes(view)
    key = raw.find(b'"traceEvents"')
    if not legacy and key < 0:
        raise TraceError(path, "JSON ends early and no 'traceEvents' array was found")
    closing = b"]" if legacy else b"]}"
    pos = len(raw)
    for _ in range(_MAX_RECOVERY_TRIES):
        pos = raw.rfind(b"}", 0, pos)
        if pos < 0 or (not legacy and pos < key):
            break
        candidate = raw[: pos + 1] + closing
        try:
            _TOP.decode(candidate) if not legacy else _EVENTS.decode(candidate)
        except (msgspec.DecodeError, UnicodeDecodeError):
            continue
        return candidate, len(raw) - (pos + 1)
    raise TraceError(path, "JSON ends early (truncated file) and no complete event could be recovered")


def read_kineto(opened: OpenedFile) -> RawTables:
    path = str(opened.path)
    data: Any = opened.data
    warnings = [TraceWarning("damaged compression", 1, d) for d in opened.damage]
    first = _first_char(data)
    if first not in (b"{", b"["):
        raise TraceError(path, "not a JSON trace (does not start with '{' or '[')")
    legacy = first == b"["
    try:
        top = _EVENTS.decode(data) if legacy else _TOP.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        problem = _describe_decode_error(exc)
        if "truncated" not in problem:
            raise TraceError(path, problem) from None
        data, dropped = _recover_truncated(path, data, legacy)
        warnings.append(TraceWarning("truncated JSON", 1, f"dropped the last {dropped} bytes"))
        top = _EVENTS.decode(data) if legacy else _TOP.decode(data)

    metadata: dict[str, Any] = {}
    if legacy:
        raw_events: list[msgspec.Raw] = top  # type: ignore[assignment]
        fmt = "kineto-legacy-array"
    else:
        assert isinstance(top, dict)
        if "traceEvents" not in top:
            if "nodes" in top:
                raise TraceError(path, "this is a PyTorch execution trace (has 'nodes'), not a Kineto trace")
            raise TraceError(path, "no 'traceEvents' array: not a Kineto/Chrome trace")
        try:
            raw_events = _EVENTS.decode(top.pop("traceEvents"))
        except msgspec.DecodeError:
            raise TraceError(path, "'traceEvents' is not an array") from None
        for key, value in top.items():
            try:
                metadata[key] = msgspec.json.decode(value)
            except msgspec.DecodeError:
                metadata[key] = None
        fmt = "kineto-json"
    if not raw_events:
        raise TraceError(path, "the trace has no events")

    exact_time = _needs_exact_time(path, raw_events)
    tables, event_warnings = decode_events(path, raw_events, exact_time)
    warnings.extend(event_warnings)
    del raw_events, top
    return RawTables(format=fmt, metadata=metadata, warnings=warnings, **tables)


def _needs_exact_time(path: str, raw_events: list[msgspec.Raw]) -> bool:
    """True when timestamps are float microseconds beyond float64's ns precision.

    Probes a sample of events; Kineto writes one time base per file.
    """
    step = max(1, len(raw_events) // 256)
    sample = raw_events[::step][:512]
    try:
        probes = _PROBE.decode(b"[" + b",".join(sample) + b"]")
    except msgspec.DecodeError:
        return False
    for p in probes:
        ts = p.ts
        if isinstance(ts, float):
            if ts != ts or abs(ts) == float("inf"):
                raise TraceError(path, "a timestamp is NaN or infinite")
            if abs(ts) > MAX_TS_US:
                raise TraceError(path, f"timestamp {ts} us is out of range")
            if abs(ts) >= FLOAT_EXACT_US:
                return True
    return False
