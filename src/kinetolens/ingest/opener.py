"""Read a trace file into one contiguous buffer with bounded memory.

``gzip.open(...).read()`` holds the output twice while it grows (about 2x the
uncompressed size at peak).  We decompress in blocks straight into a
``bytearray`` preallocated from the gzip trailer's size field, so the peak is
the uncompressed size plus one block.  A gzip stream that ends early keeps
what was decompressed and reports it, so a truncated file still loads.
"""

from __future__ import annotations

import mmap
import os
import queue
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kinetolens.errors import TraceError

try:  # ISA-L inflates gzip about 1.5-2x faster than zlib (the `fast` extra)
    from isal import isal_zlib as _inflate_lib

    _INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflate_lib.error)
except ImportError:  # pragma: no cover - depends on the installed extras
    _inflate_lib = zlib  # type: ignore[no-redef]
    _INFLATE_ERRORS = (zlib.error,)

_BLOCK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class OpenedFile:
    """The file's bytes (decompressed) and what went wrong reading them."""

    path: Path
    data: bytes | bytearray | mmap.mmap | memoryview
    compressed: bool
    damage: list[str] = field(default_factory=list)


def gzip_size_hint(path: Path, file_size: int) -> int:
    """Uncompressed size from the gzip trailer (mod 2**32); a hint only."""
    if file_size < 18:
        return 0
    with path.open("rb") as fh:
        fh.seek(-4, os.SEEK_END)
        (isize,) = struct.unpack("<I", fh.read(4))
    # ISIZE is modulo 4 GiB and can be garbage on truncated files; never
    # trust a hint smaller than the compressed size or absurdly large.
    if isize < file_size or isize > file_size * 2000:
        return 0
    return isize


def _corrupt(exc: Exception, pos: int) -> str:
    reason = str(exc).rpartition("while decompressing data: ")[2] or str(exc)
    after = f" after {pos} decompressed bytes" if pos else ""
    return f"corrupt gzip data ({reason}){after}: the file is damaged, not just cut short"


class _Truncated(Exception):
    """The gzip stream ended early; everything yielded before is intact."""


class _TrailingGarbage(Exception):
    """Bytes after the last gzip member that are not another member."""

    def __init__(self, junk: int) -> None:
        super().__init__(junk)  # args rebuild it when unpickled
        self.junk = junk


def _inflate(path: Path, max_out: int = 0) -> Iterator[bytes]:
    """Decompressed blocks of every gzip member of ``path``, in order.

    The one decompression loop of kinetolens: the whole-file reader and the
    streaming reader differ only in what they do with damage.  After the
    last good block it raises ``_Truncated`` (the stream just ends),
    ``_TrailingGarbage`` (junk after a complete member, whose CRC passed) or
    ``zlib.error`` (corrupt data).  ``max_out`` caps each block (0: no cap).
    """
    decomp = _inflate_lib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
    with path.open("rb") as fh:
        data = fh.read(_BLOCK)
        while data:
            out = decomp.decompress(data, max_out)
            if out:
                yield out
            if decomp.eof:
                rest = decomp.unused_data + fh.read(_BLOCK)
                if not rest:
                    return
                if len(rest) < len(GZIP_MAGIC):
                    rest += fh.read(len(GZIP_MAGIC))
                if not rest.startswith(GZIP_MAGIC):
                    raise _TrailingGarbage(len(rest) + len(fh.read()))
                decomp = _inflate_lib.decompressobj(wbits=31)
                data = rest
            else:
                data = decomp.unconsumed_tail or fh.read(_BLOCK)
    tail = decomp.flush()
    if tail:
        yield tail
    raise _Truncated


def _gunzip(path: Path, file_size: int) -> tuple[bytearray, list[str]]:
    """Decompress every gzip member of ``path``; recover only a truncated tail.

    A stream that simply *ends early* is recoverable: deflate output is a
    deterministic function of its input, so every byte decompressed before
    the cut is exactly what the writer wrote.  A stream with *corrupt bytes*
    is not: deflate has no per-block checksum, so data decoded between the
    damage and the point where zlib notices (often only the CRC32 check at
    the very end) may be garbage that still parses as plausible numbers.
    Any ``zlib.error`` is therefore fatal, whatever was decoded before it.
    Bytes after the last complete member that are not another gzip member
    are ignored with a warning (the data before them passed its CRC check).
    """
    hint = gzip_size_hint(path, file_size)
    out = bytearray(hint) if hint else bytearray()
    pos = 0
    damage: list[str] = []
    try:
        for chunk in _inflate(path):
            end = pos + len(chunk)
            if end > len(out):
                out.extend(b"\0" * (end - len(out)))
            out[pos:end] = chunk
            pos = end
    except _INFLATE_ERRORS as exc:
        raise TraceError(path, _corrupt(exc, pos)) from None
    except _TrailingGarbage as garbage:
        damage.append(f"ignored {garbage.junk} bytes of trailing garbage after the gzip data")
    except _Truncated:
        if pos == 0:
            raise TraceError(path, "gzip stream ends early (truncated file) before any data") from None
        damage.append(f"gzip stream ends early (truncated file): kept {pos} bytes")
    if pos != len(out):
        del out[pos:]
    if pos == 0:
        raise TraceError(path, "gzip file holds no data")
    return out, damage


def open_trace_bytes(path: str | Path) -> OpenedFile:
    """Return the decompressed bytes of ``path`` (gzip detected by magic)."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise TraceError(p, "no such file") from None
    except OSError as exc:
        raise TraceError(p, f"cannot read file ({exc.strerror})") from None
    if p.is_dir():
        raise TraceError(p, "is a directory, expected a trace file")
    if size == 0:
        raise TraceError(p, "file is empty")
    try:
        with p.open("rb") as fh:
            magic = fh.read(2)
    except OSError as exc:
        raise TraceError(p, f"cannot read file ({exc.strerror})") from None
    if magic == GZIP_MAGIC:
        data, damage = _gunzip(p, size)
        return OpenedFile(p, data, True, damage)
    with p.open("rb") as fh:
        # A private read-only map: the kernel pages it in and can drop it
        # again under pressure, and msgspec decodes from it without a copy.
        data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return OpenedFile(p, data, False, [])


class StreamUnsupported(Exception):
    """The streaming reader stepped aside; the whole-file reader takes over.

    Raised for anything the fast path does not handle itself (damage, odd
    layouts, errors that deserve a precise message): the whole-file reader
    then reads the file again and reports or recovers exactly.
    """


_QUEUE_DEPTH = 3


def plain_blocks(path: Path, size: int) -> Iterator[bytes]:
    """The file in blocks (read, not mapped, so the pages are not our RSS)."""
    with path.open("rb") as fh:
        while block := fh.read(size):
            yield block


def gzip_blocks(path: Path, size: int) -> Iterator[bytes]:
    """Decompressed blocks of a gzip file, inflated on a background thread.

    zlib releases the GIL while it inflates, so decompression overlaps the
    decoding of the previous block; the queue bounds how far it runs ahead.
    Any damage (corrupt data, a truncated stream, trailing garbage) raises
    :class:`StreamUnsupported` so the whole-file reader can recover or
    report it.
    """
    blocks: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=_QUEUE_DEPTH)
    stop = threading.Event()

    def put(item: bytes | BaseException | None) -> None:
        while not stop.is_set():
            try:
                blocks.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def inflate() -> None:
        try:
            for block in _inflate(path, size):
                if stop.is_set():
                    return
                put(block)
            put(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(StreamUnsupported(type(exc).__name__))

    worker = threading.Thread(target=inflate, name="kinetolens-gunzip", daemon=True)
    worker.start()
    try:
        while True:
            item = blocks.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


def file_blocks(path: Path, size: int) -> Iterator[bytes]:
    """Decompressed blocks of at most ``size`` bytes, gzip detected by its magic."""
    with path.open("rb") as fh:
        magic = fh.read(2)
    return gzip_blocks(path, size) if magic == GZIP_MAGIC else plain_blocks(path, size)
