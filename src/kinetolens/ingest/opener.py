"""Read a trace file into one contiguous buffer with bounded memory.

``gzip.open(...).read()`` holds the output twice while it grows (about 2x the
uncompressed size at peak).  We decompress in blocks straight into a
``bytearray`` preallocated from the gzip trailer's size field, so the peak is
the uncompressed size plus one block.  A gzip stream that ends early keeps
what was decompressed and reports it, so a truncated file still loads.
"""

from __future__ import annotations

import errno
import mmap
import os
import queue
import stat
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kinetolens.errors import TraceError
from kinetolens.registry.sizes import parse_size

try:  # ISA-L inflates gzip about 1.5-2x faster than zlib (the `fast` extra)
    from isal import isal_zlib as _inflate_lib

    _INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflate_lib.error)
except ImportError:  # pragma: no cover - depends on the installed extras
    _inflate_lib = zlib  # type: ignore[no-redef]
    _INFLATE_ERRORS = (zlib.error,)

_BLOCK = 1 << 20
#: The most one decompress call may produce: a block of zeros can inflate
#: a thousandfold, so the output is capped per call, never only per file.
_MAX_OUT_PER_CALL = 16 << 20
GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"

#: Decompressed bytes allowed per gzip file (bytes or K/M/G/T); and the
#: largest ratio of decompressed to compressed bytes read so far, checked
#: once more than ``INFLATE_RATIO_FLOOR`` bytes came out.  Real traces
#: compress 5-30x; a gzip bomb (zeros) about 1000x.  0 turns a limit off.
MAX_INFLATE_ENV = "KINETOLENS_MAX_INFLATE"
MAX_INFLATE_RATIO_ENV = "KINETOLENS_MAX_INFLATE_RATIO"
DEFAULT_MAX_INFLATE = 64 << 30
DEFAULT_MAX_INFLATE_RATIO = 200
INFLATE_RATIO_FLOOR = 64 << 20


@dataclass(frozen=True)
class InflateLimit:
    """How far one gzip file may inflate (0: no limit)."""

    max_bytes: int
    max_ratio: float

    @classmethod
    def from_env(cls) -> InflateLimit:
        size = parse_size(os.environ.get(MAX_INFLATE_ENV))
        try:
            ratio = float(os.environ.get(MAX_INFLATE_RATIO_ENV, ""))
        except ValueError:
            ratio = DEFAULT_MAX_INFLATE_RATIO
        return cls(DEFAULT_MAX_INFLATE if size is None else size, ratio)

    def check(self, path: Path, produced: int, consumed: int) -> None:
        """Raise a TraceError once ``produced`` bytes from ``consumed`` exceed a limit."""
        if self.max_bytes and produced > self.max_bytes:
            raise TraceError(
                path,
                f"gzip data inflates to more than {self.max_bytes:,} bytes (from {consumed:,} compressed bytes): "
                f"a gzip bomb, or a trace larger than ${MAX_INFLATE_ENV} allows",
            )
        if self.max_ratio and produced > INFLATE_RATIO_FLOOR and produced > self.max_ratio * max(consumed, 1):
            raise TraceError(
                path,
                f"gzip data inflates more than {self.max_ratio:,.0f}x ({produced:,} bytes from {consumed:,} "
                f"compressed bytes): a gzip bomb, not a trace (${MAX_INFLATE_RATIO_ENV} sets the limit)",
            )


@dataclass
class OpenedFile:
    """The file's bytes (decompressed) and what went wrong reading them."""

    path: Path
    data: bytes | bytearray | mmap.mmap | memoryview
    compressed: bool
    damage: list[str] = field(default_factory=list)


#: What a path that is not a regular file is, for the error message.
_FILE_KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _stat_problem(exc: OSError) -> str:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "no such file"
    if exc.errno == errno.ELOOP:
        return "symlink loop (too many levels of symbolic links)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied (the file or a directory above it cannot be read)"
    return f"cannot read file ({exc.strerror or exc})"


def check_trace_file(path: str | Path) -> os.stat_result:
    """The ``stat`` of ``path`` if it can be a trace file; else a one-line TraceError.

    Checked before anything opens the file: opening a named pipe blocks
    until a writer appears, and a device never ends.  A regular file whose
    size is 0 but which has content is a pseudo-file (``/proc``, ``/sys``).
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        raise TraceError(p, _stat_problem(exc)) from None
    except ValueError:  # a NUL byte in the name
        raise TraceError(p, "no such file") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceError(p, "is a directory, expected a trace file")
    if not stat.S_ISREG(st.st_mode):
        kind = next((what for test, what in _FILE_KINDS if test(st.st_mode)), "a special file")
        raise TraceError(p, f"is {kind}, not a regular file: expected a trace file")
    if st.st_size == 0:
        try:
            with p.open("rb") as fh:
                has_content = bool(fh.read(1))
        except OSError as exc:
            raise TraceError(p, _stat_problem(exc)) from None
        if has_content:
            raise TraceError(p, "reports a size of 0 but has content: a special file (as in /proc), not a trace file")
        raise TraceError(p, "file is empty")
    return st


def gzip_size_hint(path: Path, file_size: int) -> int:
    """Uncompressed size from the gzip trailer (mod 2**32); a hint only."""
    if file_size < 18:
        return 0
    with path.open("rb") as fh:
        fh.seek(-4, os.SEEK_END)
        (isize,) = struct.unpack("<I", fh.read(4))
    # ISIZE is modulo 4 GiB and can be garbage on truncated files; never
    # trust a hint smaller than the compressed size or absurdly large.
    limit = InflateLimit.from_env()
    if isize < file_size or isize > file_size * 2000:
        return 0
    if (limit.max_bytes and isize > limit.max_bytes) or (limit.max_ratio and isize > limit.max_ratio * file_size):
        return 0  # never preallocate what the limit will refuse
    return isize


def _corrupt(exc: Exception, pos: int) -> str:
    reason = str(exc).rpartition("while decompressing data: ")[2] or str(exc)
    after = f" after {pos:,} decompressed bytes" if pos else ""
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
    ``zlib.error`` (corrupt data).  ``max_out`` caps each block (0: the
    default cap).  More output than :class:`InflateLimit` allows raises a
    :class:`TraceError` as soon as it is produced.
    """
    limit = InflateLimit.from_env()
    decomp = _inflate_lib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
    produced = 0
    with path.open("rb") as fh:
        data = fh.read(_BLOCK)
        while data:
            out = decomp.decompress(data, max_out or _MAX_OUT_PER_CALL)
            if out:
                produced += len(out)
                limit.check(path, produced, fh.tell() - len(decomp.unconsumed_tail))
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
        damage.append(f"ignored {garbage.junk:,} bytes of trailing garbage after the gzip data")
    except _Truncated:
        if pos == 0:
            raise TraceError(path, "gzip stream ends early (truncated file) before any data") from None
        damage.append(
            f"gzip stream ends early (truncated file): all {file_size:,} compressed bytes held "
            f"{pos:,} bytes of JSON; the rest of the trace is missing"
        )
    if pos != len(out):
        del out[pos:]
    if pos == 0:
        raise TraceError(path, "gzip file holds no data")
    return out, damage


def open_trace_bytes(path: str | Path) -> OpenedFile:
    """Return the decompressed bytes of ``path`` (gzip detected by magic)."""
    p = Path(path)
    size = check_trace_file(p).st_size
    try:
        with p.open("rb") as fh:
            magic = fh.read(2)
    except OSError as exc:
        raise TraceError(p, f"cannot read file ({exc.strerror})") from None
    if magic == GZIP_MAGIC:
        unpacked, damage = _gunzip(p, size)
        if unpacked.startswith(UTF8_BOM):
            del unpacked[: len(UTF8_BOM)]
        return OpenedFile(p, unpacked, True, damage)
    with p.open("rb") as fh:
        # A private read-only map: the kernel pages it in and can drop it
        # again under pressure, and msgspec decodes from it without a copy.
        data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    if data[: len(UTF8_BOM)] == UTF8_BOM:
        return OpenedFile(p, memoryview(data)[len(UTF8_BOM) :], False, [])
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
        except TraceError as exc:  # over the inflate limit: no reader would do better
            put(exc)
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


def without_bom(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """``blocks`` less a UTF-8 byte order mark at the start (some Windows
    tools write one; JSON forbids it, and it carries no information)."""
    first = next(blocks, b"")
    yield first.removeprefix(UTF8_BOM)
    yield from blocks


def file_blocks(path: Path, size: int) -> Iterator[bytes]:
    """Decompressed blocks of at most ``size`` bytes, gzip detected by its
    magic, a leading UTF-8 byte order mark dropped."""
    with path.open("rb") as fh:
        magic = fh.read(2)
    return without_bom(gzip_blocks(path, size) if magic == GZIP_MAGIC else plain_blocks(path, size))
