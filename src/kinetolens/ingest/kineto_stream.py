"""Stream a Kineto trace: decode events while the rest of the file is read.

The whole-file reader (:mod:`kinetolens.ingest.kineto_file`) needs the
complete decompressed JSON in memory before it can split it, which alone is
1x the JSON size.  This reader never holds more than a few megabytes of
text: it cuts the ``traceEvents`` array into pieces at event boundaries and
decodes each piece as soon as it arrives (gzip inflation runs on another
thread meanwhile).

Finding an event boundary without parsing means guessing: a ``}`` ``,``
``{`` sequence may sit inside a string (a kernel name, say).  A guess is
only accepted if the piece before it decodes as a JSON array of complete
events; a cut inside a string leaves that string unterminated, and a cut
inside a nested object leaves it unbalanced, so a wrong guess never
decodes.  Anything unusual (damage, a layout this reader does not expect,
a malformed event) raises :class:`StreamUnsupported`, and the whole-file
reader, which recovers truncated files and names the byte of an error,
reads the file instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from kinetolens.ingest.kineto import ChunkSource, RawTables, decode_events
from kinetolens.ingest.kineto_columns import ArgsInvalid
from kinetolens.ingest.kineto_schema import Event, ExactTimeEvent
from kinetolens.ingest.opener import StreamUnsupported, file_blocks
from kinetolens.ingest.text_repair import is_text_error

#: Decoded structs and the column lists built from them take about ten
#: times their text in Python memory, so the piece size sets the reader's
#: high-water mark; smaller pieces cost more per-piece work.
PIECE_BYTES = 1 << 20
TAIL_WINDOW = 1 << 16
MAX_CUT_TRIES = 8
_MAX_HEAD_BYTES = 64 << 20
_MAX_BACKLOG_BYTES = 64 << 20

_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[\s*')
#: ``},{`` followed by a key's opening quote.  Inside a JSON string a quote
#: is escaped (``\"``), so text such as ``"}, {\"ph\"`` in a kernel name or
#: a call stack never matches; only a string that *ends* in ``},{`` can.
BETWEEN_EVENTS = re.compile(rb'\}\s*,\s*\{(?=\s*")')
ARRAY_END = re.compile(rb"\}\s*\]")

_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_EVENTS = {
    False: msgspec.json.Decoder(list[Event], strict=False),
    True: msgspec.json.Decoder(list[ExactTimeEvent], strict=False),
}


def decode_piece(piece: bytes, exact: bool) -> list[Event]:
    return _EVENTS[exact].decode(b"".join((b"[", piece, b"]")))


def try_piece(piece: bytes, exact: bool = False) -> list[Event] | None:
    """The piece's events, or None when the cut was a wrong guess.

    Cuts fall between ASCII characters, so a piece with invalid UTF-8 or a
    lone surrogate escape holds it whatever the cut: no other cut helps, and
    the whole-file reader replaces such text.
    """
    try:
        return decode_piece(piece, exact)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        if is_text_error(exc, piece):
            raise StreamUnsupported("text that is not valid Unicode") from None
        return None


def _object(text: bytes) -> dict[str, Any]:
    """Decode top-level ``"key": value`` pairs (without their braces)."""
    try:
        pairs = _OBJECT.decode(b"".join((b"{", text, b"}")))
        return {key: msgspec.json.decode(value) for key, value in pairs.items()}
    except (msgspec.DecodeError, UnicodeDecodeError):
        raise StreamUnsupported("top-level object") from None


def _head(text: bytes) -> dict[str, Any]:
    """Metadata written before ``traceEvents``: ``{ "k": v, ... ,``."""
    body = text.strip()
    if not body.startswith(b"{"):
        raise StreamUnsupported("not a JSON object")
    body = body[1:].strip()
    if not body:
        return {}
    if not body.endswith(b","):
        raise StreamUnsupported("head")
    return _object(body[:-1])


def tail(text: bytes) -> dict[str, Any]:
    """Metadata written after the array: ``, "k": v ... }``."""
    body = text.strip()
    if not body.endswith(b"}"):
        raise StreamUnsupported("tail")
    body = body[:-1].strip()
    if not body:
        return {}
    if not body.startswith(b","):
        raise StreamUnsupported("tail")
    return _object(body[1:])


class Pieces:
    """Cuts the event array into validated pieces; collects the metadata."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self.blocks = blocks
        self.metadata: dict[str, Any] = {}
        #: Set once a chunk was asked for exact times: later pieces are then
        #: validated with the exact decoder, so none is decoded twice.
        self.exact = False

    def __iter__(self) -> Iterator[ChunkSource]:
        buf = self._skip_head()
        if len(buf) >= PIECE_BYTES // 2:
            # The first block, less the header, is cut on its own: with the
            # next block added, the first piece would be twice the others.
            buf, source = self._cut(buf)
            if source is not None:
                yield source
        # Blocks wait in a list and are joined only when a cut is tried; when
        # no cut decodes (one event larger than a piece, or a run of blanks),
        # the next try waits until the backlog has doubled.  Joining and
        # scanning the whole backlog at every block would be quadratic.
        pending, size, next_try = [buf], len(buf), PIECE_BYTES
        for block in self.blocks:
            pending.append(block)
            size += len(block)
            if size >= next_try:
                buf, source = self._cut(b"".join(pending))
                pending, size = [buf], len(buf)
                if source is not None:
                    next_try = PIECE_BYTES
                    yield source
                else:
                    next_try = 2 * size
        yield self._last(b"".join(pending))

    def _skip_head(self) -> bytes:
        pending: list[bytes] = []
        size, next_try = 0, 0
        blocks = iter(self.blocks)
        while True:
            block = next(blocks, None)
            if block is not None:
                pending.append(block)
                size += len(block)
                if size < next_try:
                    continue  # as in __iter__: a long head is joined and searched a linear number of times
            next_try = 2 * size
            buf = b"".join(pending)
            pending = [buf]
            if not buf.lstrip()[:1] in (b"", b"{"):
                raise StreamUnsupported("not a JSON object")
            m = _ARRAY_START.search(buf)
            if m is not None:
                self.metadata.update(_head(buf[: m.start()]))
                rest = buf[m.end() :]
                if rest.startswith(b"]"):
                    raise StreamUnsupported("no events")
                return rest
            if block is None or len(buf) > _MAX_HEAD_BYTES:
                break
        raise StreamUnsupported("no traceEvents array")

    def _source(self, piece: bytes, events: list[Event]) -> ChunkSource:
        decoded_exact = self.exact

        def decode(exact: bool) -> list[Event]:
            if exact == decoded_exact:
                return events
            self.exact = self.exact or exact
            return decode_piece(piece, exact)

        return decode

    def _cut(self, buf: bytes) -> tuple[bytes, ChunkSource | None]:
        """The longest validated piece of whole events, and what is left.

        When none of the last few guesses decodes (they all sit inside long
        strings, or one event is larger than a piece), read on and guess
        again with more text; only a backlog no event boundary resolves
        means a malformed event, left to the whole-file reader.
        """
        start = max(0, len(buf) - TAIL_WINDOW)
        cuts = list(BETWEEN_EVENTS.finditer(buf, start)) or list(BETWEEN_EVENTS.finditer(buf))
        for m in reversed(cuts[-MAX_CUT_TRIES:]):
            piece = buf[: m.start() + 1]
            events = try_piece(piece, self.exact)
            if events is not None:
                return buf[m.end() - 1 :], self._source(piece, events)
        if len(buf) > _MAX_BACKLOG_BYTES:
            raise StreamUnsupported("no event boundary decodes")
        return buf, None

    def _last(self, buf: bytes) -> ChunkSource:
        for m in reversed(list(ARRAY_END.finditer(buf))[-MAX_CUT_TRIES:]):
            piece = buf[: m.start() + 1]
            events = try_piece(piece, self.exact)
            if events is not None:
                self.metadata.update(tail(buf[m.end() :]))
                return self._source(piece, events)
        raise StreamUnsupported("end of the event array")


def stream_kineto(path: Path) -> RawTables:
    """Read a well-formed Kineto JSON(.gz) file piece by piece.

    Raises :class:`StreamUnsupported` for anything else; the caller then
    uses the whole-file reader.
    """
    pieces = Pieces(file_blocks(path, PIECE_BYTES))
    try:
        decoded = decode_events(str(path), pieces)
    except ArgsInvalid:
        raise StreamUnsupported("args of an event do not decode") from None
    except UnicodeDecodeError:  # shapes or dtypes that are not UTF-8
        raise StreamUnsupported("text that is not valid Unicode") from None
    finally:
        close = getattr(pieces.blocks, "close", None)
        if close is not None:
            close()
    return RawTables(format="kineto-json", metadata=pieces.metadata, warnings=decoded.warnings, **decoded.tables)
