"""A second, narrow pass over a Kineto file for the rare events whose open-ended
args the main decoder does not keep (CUPTI counter ranges, counter events).

The main decoder names only the args it reads, which is what makes it fast;
the few readers that need other args decode the file again into a struct of
their own with those fields as raw JSON.  This module is their shared decode:
the whole document at once when it is sound, event by event (skipping the
malformed ones, as the main reader does) when one event is invalid, and cut
after the last complete event when the file is truncated.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from kinetolens.errors import TraceError
from kinetolens.ingest.kineto_file import _recover_truncated
from kinetolens.ingest.kineto_values import raw_us_to_ns
from kinetolens.ingest.opener import open_trace_bytes
from kinetolens.ingest.text_repair import is_text_error, repair_json_text

E = TypeVar("E", bound=msgspec.Struct)
_ARGS = msgspec.json.Decoder(dict[str, Any])


class _RawDocument(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw] = []


@cache
def _document(event: type[msgspec.Struct]) -> type[msgspec.Struct]:
    return msgspec.defstruct(f"{event.__name__}Document", [("traceEvents", list[event], [])], gc=False)  # type: ignore[valid-type]


def _decode_each(data: Any, legacy: bool, event: type[E]) -> list[E]:
    raws = (
        msgspec.json.decode(data, type=list[msgspec.Raw])
        if legacy
        else msgspec.json.decode(data, type=_RawDocument).traceEvents
    )
    events = []
    for raw in raws:
        try:
            events.append(msgspec.json.decode(raw, type=event))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return events


def rescan_events(path: str, data: Any, event: type[E]) -> list[E]:
    """Every event of the file decoded as ``event`` (legacy bare arrays too)."""
    legacy = bytes(data[:64]).lstrip().startswith(b"[")
    try:
        if legacy:  # old traces: a bare event list
            return msgspec.json.decode(data, type=list[event])  # type: ignore[valid-type]
        return msgspec.json.decode(data, type=_document(event)).traceEvents  # type: ignore[attr-defined, no-any-return]
    except msgspec.ValidationError:
        return _decode_each(data, legacy, event)
    except msgspec.DecodeError as exc:
        if is_text_error(exc):
            raise
        repaired, _ = _recover_truncated(path, data, legacy)
        return _decode_each(repaired, legacy, event)


def rescan_file(path: str | Path, event: type[E]) -> list[E] | None:
    """:func:`rescan_events` of the file at ``path``; None when it is damaged
    past recovery (the main load has already reported that damage)."""
    opened = open_trace_bytes(path)
    try:
        try:
            return rescan_events(str(path), opened.data, event)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            if not is_text_error(exc):
                raise
        # Text that is not valid Unicode: replaced, as the main load did.
        return rescan_events(str(path), repair_json_text(opened.data).data, event)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, TraceError):
        return None


def numeric_args(args: msgspec.Raw) -> Iterator[tuple[str, float]]:
    """The numeric entries of an event's raw ``args`` (booleans and text left out).

    Raises ``msgspec.DecodeError`` when the args are not a JSON object.
    """
    for key, value in _ARGS.decode(args).items() if bytes(args) else ():
        if not isinstance(value, bool) and isinstance(value, (int, float)):
            yield key, float(value)


def optional_ns(raw: msgspec.Raw) -> int | None:
    """A raw microsecond time as exact nanoseconds; None where the event has none."""
    return raw_us_to_ns(raw) if bytes(raw) else None
