"""Open a Kineto trace file: detect its layout, recover a truncated tail.

Layouts: the usual ``{"traceEvents": [...], ...metadata}`` object, and the
bare JSON array of events that 2020-era Kineto wrote (which torch-tb-profiler
and HTA both reject).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import msgspec

from kinetolens.errors import TraceError, TraceWarning
from kinetolens.ingest.kineto import ChunkSource, RawTables, decode_events
from kinetolens.ingest.kineto_columns import invalid_args
from kinetolens.ingest.kineto_schema import Event, ExactTimeEvent
from kinetolens.ingest.opener import OpenedFile
from kinetolens.ingest.text_repair import InvalidText, is_text_error, repair_json_text

CHUNK_EVENTS = 8192
_MAX_RECOVERY_TRIES = 64
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_EVENTS = msgspec.json.Decoder(list[msgspec.Raw])


class _ChunkDecoder:
    """Typed decoding of one chunk, with a per-event fallback for bad events.

    An event of the wrong shape is skipped and counted; a number too large
    for its type (``1e400``) is not: that is bad input, and skipping the
    event would silently change the totals.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._list = {
            exact: msgspec.json.Decoder(list[etype], strict=False)  # type: ignore[valid-type]
            for exact, etype in ((False, Event), (True, ExactTimeEvent))
        }
        self._one = {
            exact: msgspec.json.Decoder(etype, strict=False) for exact, etype in ((False, Event), (True, ExactTimeEvent))
        }
        self._bad_per_chunk: dict[int, int] = {}
        self.first_bad = ""

    @property
    def bad_events(self) -> int:
        # Per chunk, so a chunk decoded twice (exact timestamps) counts once.
        return sum(self._bad_per_chunk.values())

    def chunks(self, raws: list[msgspec.Raw]) -> Iterator[ChunkSource]:
        for start in range(0, len(raws), CHUNK_EVENTS):
            part = raws[start : start + CHUNK_EVENTS]
            yield lambda exact, part=part, start=start: self.decode(part, start, exact)  # type: ignore[misc]

    def decode(self, raws: list[msgspec.Raw], first_index: int, exact: bool) -> list[Event]:
        try:
            events = self._list[exact].decode(b"[" + b",".join(raws) + b"]")
            bad = 0
        except msgspec.DecodeError:
            events, bad = self._each(raws, first_index, exact)
        # Args are decoded per table later (kineto_columns); an event whose
        # args do not fit is malformed in the same way, so skip it here.
        wrong, first = invalid_args(events)
        if wrong:
            self._check_range(first, first_index + wrong[0])
            drop = set(wrong)
            events = [e for i, e in enumerate(events) if i not in drop]
            bad += len(wrong)
            self.first_bad = self.first_bad or first
        self._bad_per_chunk[first_index] = bad
        return events

    def _each(self, raws: list[msgspec.Raw], first_index: int, exact: bool) -> tuple[list[Event], int]:
        events: list[Event] = []
        bad = 0
        for i, raw in enumerate(raws):
            try:
                events.append(self._one[exact].decode(raw))
            except msgspec.DecodeError as exc:
                if is_text_error(exc, raw):
                    raise  # repaired and decoded again, never skipped
                self._check_range(str(exc), first_index + i)
                bad += 1
                if not self.first_bad:
                    self.first_bad = str(exc)
        return events, bad

    def _check_range(self, error: str, index: int) -> None:
        """A number too large for its type is bad input, never a skippable event."""
        if "out of range" in error:
            where = error.rpartition(" - at ")[2]
            raise TraceError(self.path, f"number out of range at {where} in traceEvents[{index}]")


def _first_char(data: Any) -> bytes:
    view = memoryview(data)
    for i in range(min(len(view), 4096)):
        c = bytes(view[i : i + 1])
        if c not in b" \t\r\n\xef\xbb\xbf":
            return c
    return b""


#: Leading bytes of file types people pass by mistake, so the error can say
#: what the file is rather than only what it is not.
_NOT_JSON_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"\x7fELF", "an ELF executable or library"),
    (b"PK\x03\x04", "a zip archive (a torch.save checkpoint?)"),
    (b"%PDF", "a PDF document"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"BZh", "bzip2-compressed data (only gzip is decompressed)"),
    (b"\xfd7zXZ\x00", "xz-compressed data (only gzip is decompressed)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data (only gzip is decompressed)"),
)
_BYTE_AT = re.compile(r"\(byte (\d+)\)")
_UTF8_SCAN = 1 << 20


def _not_json(data: Any) -> str:
    head = bytes(memoryview(data)[:16])
    for magic, what in _NOT_JSON_MAGIC:
        if head.startswith(magic):
            return f"not a JSON trace: this is {what}"
    return "not a JSON trace (does not start with '{' or '[')"


def _first_invalid_utf8(data: Any) -> int | None:
    """File offset of the first byte that is not valid UTF-8, if any.

    msgspec's ``UnicodeDecodeError`` positions are relative to the string
    being decoded, not the file; this scan (error path only, in bounded
    slices) finds the offset worth reporting.
    """
    view = memoryview(data)
    n = len(view)
    off = 0
    while off < n:
        end = min(n, off + _UTF8_SCAN)
        try:
            bytes(view[off:end]).decode("utf-8")
        except UnicodeDecodeError as exc:
            if end < n and exc.reason == "unexpected end of data":
                off += exc.start  # a multi-byte character split by the slice
                continue
            return off + exc.start
        off = end
    return None


def _describe_decode_error(exc: Exception, data: Any = None, compressed: bool = False) -> str:
    """One line for a msgspec/UTF-8 failure, with a file (or decompressed) offset."""
    where = " of the decompressed data" if compressed else ""
    if isinstance(exc, UnicodeDecodeError):
        at = _first_invalid_utf8(data) if data is not None else None
        if at is None:
            return "invalid UTF-8 in a string"
        return f"invalid UTF-8 at byte {at}{where}"
    text = str(exc)
    if "truncated" in text:
        return "JSON ends early (truncated file)"
    m = _BYTE_AT.search(text)
    if m and data is not None:
        # NaN/Infinity are what Python's json.dump writes for non-finite
        # floats; they are not JSON and msgspec only says "invalid character".
        at = int(m.group(1))
        token = bytes(memoryview(data)[at : at + 9])
        for bad in (b"NaN", b"Infinity", b"-Infinity"):
            if token.startswith(bad):
                return f"invalid JSON: {bad.decode()} is not a JSON number (byte {at}{where})"
        text = text[: m.start()] + f"(byte {at}{where})" + text[m.end() :]
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
        raise TraceError(path, "JSON ends early (truncated file) and no 'traceEvents' array was found")
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
    """The whole-file reader: recovers what can be recovered, names what cannot.

    Text that is not valid Unicode (a kernel name with Latin-1 bytes, a lone
    surrogate escape) is replaced with U+FFFD and counted; the buffer is only
    copied and repaired once a decoder has failed on such text.
    """
    path = str(opened.path)
    try:
        return _read(opened, opened.data, [])
    except InvalidText as bad:
        original = bad.__cause__
    repaired = repair_json_text(opened.data)
    where = " of the decompressed data" if opened.compressed else ""
    warning = TraceWarning(
        "invalid text replaced",
        max(repaired.count, 1),
        f"text that is not valid UTF-8 or Unicode (first at byte {repaired.first}{where}) replaced with U+FFFD",
    )
    try:
        return _read(opened, repaired.data, [warning])
    except InvalidText:
        # Nothing left to replace: name the original problem.
        exc = original if isinstance(original, Exception) else ValueError("invalid text")
        raise TraceError(path, _describe_decode_error(exc, opened.data, opened.compressed)) from None


def _read(opened: OpenedFile, data: Any, warnings: list[TraceWarning]) -> RawTables:
    """One pass over ``data``; raises :class:`InvalidText` (with the decoder's
    error as its cause) at the first string that is not valid Unicode."""
    try:
        return _read_checked(opened, data, warnings)
    except (UnicodeDecodeError, msgspec.DecodeError) as exc:
        if is_text_error(exc, data):
            raise InvalidText(str(exc)) from exc
        raise


#: The keys of vLLM's / TraceLens' ``execution_details.json`` entries (one per captured graph).
_CAPTURE_DETAILS_KEYS = frozenset({"file", "mode"})
_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _check_array_holds_events(path: str, raws: list[msgspec.Raw], sample: int = 64) -> None:
    """A bare JSON array is a trace only if its objects are trace events
    (they carry ``ph``); graph-capture metadata is an array of objects too."""
    try:
        items = [_OBJECT.decode(r) for r in raws[:sample]]
    except msgspec.DecodeError:
        return  # not all objects: the event decoder says what is wrong
    if not items or any("ph" in item for item in items):
        return
    if all(_CAPTURE_DETAILS_KEYS <= item.keys() for item in items):
        raise TraceError(
            path,
            "graph-capture metadata (vLLM's execution_details.json: the capture trace's file name, batch size and "
            "capture mode), not a trace; load the replay trace, which pairs with the capture_traces/ folder beside it",
        )
    raise TraceError(path, f"a JSON array of {len(raws):,} object{'s' * (len(raws) != 1)} with no trace events (no \"ph\" key): not a Kineto trace")


def _read_checked(opened: OpenedFile, data: Any, warnings: list[TraceWarning]) -> RawTables:
    path = str(opened.path)
    warnings = warnings + [TraceWarning("damaged compression", 1, d) for d in opened.damage]
    first = _first_char(data)
    if first not in (b"{", b"["):
        raise TraceError(path, _not_json(data))
    legacy = first == b"["
    try:
        top = _EVENTS.decode(data) if legacy else _TOP.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        if is_text_error(exc, data):
            raise
        problem = _describe_decode_error(exc, data, opened.compressed)
        if "truncated" not in problem:
            raise TraceError(path, problem) from None
        size = len(data)
        data, dropped = _recover_truncated(path, data, legacy)
        cut = (size - dropped, dropped)
        top = _EVENTS.decode(data) if legacy else _TOP.decode(data)
    else:
        cut = None

    metadata: dict[str, Any] = {}
    if legacy:
        raw_events: list[msgspec.Raw] = top  # type: ignore[assignment]
        _check_array_holds_events(path, raw_events)
        fmt = "kineto-legacy-array"
    else:
        assert isinstance(top, dict)
        if "traceEvents" not in top:
            if "nodes" in top:
                raise TraceError(path, "this is a PyTorch execution trace (has 'nodes'), not a Kineto trace")
            if "rocprofiler-sdk-tool" in top:
                raise TraceError(path, "this is rocprofv3 (rocprofiler-sdk) JSON output, not a Kineto trace")
            raise TraceError(path, "no 'traceEvents' array: not a Kineto/Chrome trace")
        try:
            raw_events = _EVENTS.decode(top.pop("traceEvents"))
        except msgspec.DecodeError as exc:
            if is_text_error(exc):
                raise
            raise TraceError(path, "'traceEvents' is not an array") from None
        for key, value in top.items():
            try:
                metadata[key] = msgspec.json.decode(value)
            except msgspec.DecodeError as exc:
                # Raw slices skip strings without checking their encoding.
                if is_text_error(exc):
                    raise
                metadata[key] = None
        fmt = "kineto-json"
    if not raw_events:
        raise TraceError(path, "the trace has no events")
    if cut is not None:
        # Only what was read is known, not how long the trace was: a share
        # of the bytes read would say "99.99%" of a file cut to a tenth.
        json_bytes = " of the decompressed JSON" if opened.compressed else ""
        warnings.append(TraceWarning(
            "truncated JSON", 1,
            f"the file ends mid-event: kept the first {len(raw_events):,} events ({cut[0]:,} bytes{json_bytes}), "
            f"dropped the {cut[1]:,} bytes of the event cut off; how much of the trace is missing is unknown",
        ))

    decoder = _ChunkDecoder(path)
    decoded = decode_events(path, decoder.chunks(raw_events))
    warnings += decoded.warnings
    if decoder.bad_events:
        if decoder.bad_events == len(raw_events):
            raise TraceError(path, f"no event could be decoded ({decoder.first_bad})")
        warnings.append(TraceWarning("malformed events skipped", decoder.bad_events, decoder.first_bad))
    del raw_events, top
    return RawTables(format=fmt, metadata=metadata, warnings=warnings, **decoded.tables)
