"""Text that is not valid Unicode: replaced with U+FFFD and counted, never fatal.

A kernel name or a metadata string written by another tool can hold bytes
that are not UTF-8 (a Latin-1 path, a truncated multi-byte character), or a
JSON ``\\udXXX`` escape of half a surrogate pair (what Python's ``json.dump``
writes for such bytes).  Refusing the whole file for one such string, or
skipping the event that holds it, loses data that is otherwise fine; so the
readers decode with replacement and report how many sequences they replaced.

Only the slow path pays: the fast decoders validate as they go, and the
readers call into this module only after one of them failed on text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec

REPLACEMENT = "\ufffd"
_SLICE = 1 << 20
#: Bytes that ``surrogateescape`` kept (one lone surrogate per invalid byte).
_ESCAPED = re.compile("[\udc80-\udcff]+")
#: A JSON escape of either half of a UTF-16 surrogate pair.  A literal
#: prefix, so the scan of a whole file is fast; pairing is checked per match.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LOW_ESCAPE = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")


class InvalidText(Exception):
    """A decoder met text that is not valid Unicode; the reader repairs and retries."""


def is_text_error(exc: BaseException, data: Any = None) -> bool:
    """Invalid UTF-8 bytes, or a JSON escape of a lone UTF-16 surrogate.

    msgspec names a lone *low* surrogate, but a lone *high* one followed by
    text (``"\\ud800xyz"``, what ``json.dump`` writes) reads to it as an
    unterminated escape or a truncated document; given the ``data`` that
    failed, such an error counts as a text error when ``data`` holds one.
    """
    if isinstance(exc, UnicodeDecodeError):
        return True
    if not isinstance(exc, msgspec.DecodeError):
        return False
    text = str(exc)
    if "surrogate" in text:
        return True
    if data is None or not ("escape" in text or "truncated" in text):
        return False
    return bool(_lone_surrogates(data, first_only=True))


def decode_replacing(raw: bytes) -> tuple[str, int]:
    """``raw`` as text, each run of invalid bytes one U+FFFD; and how many runs."""
    text = raw.decode("utf-8", "surrogateescape")
    return _ESCAPED.subn(REPLACEMENT, text)


@dataclass
class Repaired:
    """A copy of a JSON buffer whose strings are all valid Unicode."""

    data: bytes
    #: Invalid byte runs and lone surrogate escapes replaced.
    count: int
    #: Offset of the first invalid byte or escape in the original buffer.
    first: int


def _cut(view: memoryview, start: int, end: int) -> int:
    """``end`` moved back so that no multi-byte character is split (<= 3 bytes)."""
    if end >= len(view):
        return len(view)
    cut = end
    while cut > start + 1 and end - cut < 3 and view[cut] & 0xC0 == 0x80:
        cut -= 1
    return cut


def repair_json_text(data: Any) -> Repaired:
    """Replace invalid UTF-8 and lone surrogate escapes in a JSON buffer.

    In slices, so the decoded text is never the whole file at once; valid
    slices are copied as they are.  Invalid bytes outside strings stay
    invalid JSON (now U+FFFD characters), which the decoder then reports.
    """
    view = memoryview(data)
    out = bytearray()
    count, first = 0, -1
    off, n = 0, len(view)
    while off < n:
        end = _cut(view, off, off + _SLICE)
        part = bytes(view[off:end])
        try:
            part.decode("utf-8")
        except UnicodeDecodeError as exc:
            if first < 0:
                first = off + exc.start
            text, k = decode_replacing(part)
            count += k
            part = text.encode("utf-8")
        out += part
        off = end
    fixed = bytes(out)
    del out
    lone = _lone_surrogates(fixed)
    if lone:
        first = lone[0][0] if first < 0 else first
        count += len(lone)
        parts, at = [], 0
        for start, end in lone:
            parts += [fixed[at:start], rb"\ufffd"]
            at = end
        parts.append(fixed[at:])
        fixed = b"".join(parts)
    return Repaired(fixed, count, max(first, 0))


def _lone_surrogates(data: Any, first_only: bool = False) -> list[tuple[int, int]]:
    """Spans of ``\\udXXX`` escapes that are not half of a well-formed pair
    (only the first with ``first_only``)."""
    spans: list[tuple[int, int]] = []
    pair_end = -1
    for m in _SURROGATE_ESCAPE.finditer(data):
        start, end = m.span()
        if start < pair_end:
            continue  # the low half of the pair just kept
        slashes = start
        while slashes > 0 and data[slashes - 1] == 0x5C:
            slashes -= 1
        if (start - slashes) % 2:
            continue  # an escaped backslash followed by text "udXXX"
        if data[start + 3] in b"89abAB" and _LOW_ESCAPE.match(data, end):
            pair_end = end + 6
            continue
        spans.append((start, end))
        if first_only:
            break
    return spans
