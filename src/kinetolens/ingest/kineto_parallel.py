"""Decode a big Kineto trace on several processes.

Decoding JSON holds the GIL, so threads cannot share it; processes can.  The
main process inflates the file (on its own thread, as the streaming reader
does), cuts the ``traceEvents`` array into pieces at event boundaries and
sends each piece to a worker, which decodes it into the same per-chunk
frames the serial reader builds.  The frames come back in file order and are
joined as usual, so the result is identical to the serial reader's.

Memory stays bounded by the number of pieces in flight (twice the workers),
not by the file: the main process never holds more than those pieces of
text plus the decoded columns.

The main process does not validate its cuts (that would mean decoding every
piece twice, once here, once in the worker).  A cut that lands inside a
string makes the worker's decode fail; then, and on anything else unusual
(damage, events without durations, values out of range), the parallel
reader steps aside with :class:`StreamUnsupported` and the serial readers
read the file, recover what can be recovered and word the error exactly.

Workers are fresh interpreters (``python -m kinetolens.ingest.decode_worker``;
a fork of a process running polars' thread pool can deadlock), talking over
pipes: pieces in, Arrow IPC out.  Each costs a fresh import of polars, so the
pool is only worth it for files of hundreds of megabytes.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import msgspec
import polars as pl

from kinetolens._allocator import worker_env
from kinetolens.errors import TraceError
from kinetolens.ingest.kineto import TABLES, RawTables, chunk_frames, finish_tables
from kinetolens.ingest.kineto_columns import ArgsInvalid, partition
from kinetolens.ingest.kineto_stream import (
    ARRAY_END,
    BETWEEN_EVENTS,
    MAX_CUT_TRIES,
    TAIL_WINDOW,
    Pieces,
    decode_piece,
    tail,
    try_piece,
)
from kinetolens.ingest.kineto_values import NeedsExactTime
from kinetolens.ingest.opener import GZIP_MAGIC, StreamUnsupported, file_blocks, gzip_size_hint

#: Text per piece sent to a worker: large enough that pickling and the
#: round trip are small beside the decode, small enough to bound memory.
PIECE_BYTES = 8 << 20
#: Estimated uncompressed size from which the pool pays for its start-up.
MIN_PARALLEL_BYTES = 256 << 20
#: ``KINETOLENS_DECODE_WORKERS=0`` (or 1) turns the pool off; N sets its size.
WORKERS_ENV = "KINETOLENS_DECODE_WORKERS"

_LENGTH = struct.Struct("<Q")
#: Sent instead of a table count when a piece could not be decoded.
UNSUPPORTED = 2**64 - 1


#: Below this many usable cores the main process (inflating, cutting and
#: joining) and the workers compete for the same cores, and the pool's
#: overhead (each worker imports polars afresh) eats the gain.
MIN_AUTO_CORES = 4
MAX_AUTO_WORKERS = 8


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def decode_workers() -> int:
    """Worker processes to use: the environment's choice, else one per spare core."""
    value = os.environ.get(WORKERS_ENV, "").strip()
    if value:
        try:
            return max(0, int(value))
        except ValueError:
            raise TraceError(Path(WORKERS_ENV), f"must be a whole number of workers, got {value!r}") from None
    cores = usable_cores()
    return min(cores - 1, MAX_AUTO_WORKERS) if cores >= MIN_AUTO_CORES else 0


def estimated_json_bytes(path: Path) -> int:
    """The uncompressed size, from the gzip trailer when it is plausible."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        compressed = fh.read(2) == GZIP_MAGIC
    if not compressed:
        return size
    # The trailer holds the size modulo 4 GiB; trace JSON compresses ~10-20x,
    # so a hint below that is a wrapped multi-GB file: assume the ratio.
    hint = gzip_size_hint(path, size)
    return max(hint, size * 10)


def wants_parallel(path: Path) -> int:
    """How many workers to decode ``path`` with; 0 means decode serially."""
    workers = decode_workers()
    if workers < 2 or estimated_json_bytes(path) < MIN_PARALLEL_BYTES:
        return 0
    return workers


def decode_piece_frames(path: str, piece: bytes) -> dict[str, pl.DataFrame] | None:
    """A worker's job: one piece of the event array to its per-table frames.

    None when the piece does not decode cleanly: a cut inside a string, a
    malformed event, events without durations, values out of range.
    """
    try:
        events = decode_piece(piece, False)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    p = partition(events)
    if p.missing_dur or p.negative_dur or p.skipped:
        return None  # the serial readers count what they leave out
    try:
        try:
            return chunk_frames(path, p, False)
        except NeedsExactTime:
            return chunk_frames(path, partition(decode_piece(piece, True)), True)
    except (TraceError, ArgsInvalid, UnicodeDecodeError):
        return None


class _UncheckedPieces(Pieces):
    """Cuts at the last likely event boundary, leaving validation to the workers."""

    def texts(self, piece_bytes: int) -> Iterator[bytes]:
        buf = self._skip_head()
        for block in self.blocks:
            buf += block
            if len(buf) < piece_bytes:
                continue
            start = max(0, len(buf) - TAIL_WINDOW)
            cut = None
            for cut in BETWEEN_EVENTS.finditer(buf, start):
                pass
            if cut is not None:
                yield buf[: cut.start() + 1]
                buf = buf[cut.end() - 1 :]
        yield from self._final(buf)

    def _final(self, buf: bytes) -> list[bytes]:
        """The last pieces, up to the end of the event array, which is validated here.

        Text after the array (``deviceProperties`` and the like) holds ``}]``
        and ``},{`` too, and a device's properties even decode as an event
        with every field absent.  So the end is the last ``}]`` whose rest
        parses as the object's tail *and* whose last events decode as events
        that have a phase; only those last few kilobytes are decoded here,
        the rest goes to a worker unchecked.
        """
        for end in reversed(list(ARRAY_END.finditer(buf))[-MAX_CUT_TRIES:]):
            try:
                meta = tail(buf[end.end() :])
            except StreamUnsupported:
                continue
            events = buf[: end.start() + 1]
            cuts = list(BETWEEN_EVENTS.finditer(events, max(0, len(events) - TAIL_WINDOW)))
            for cut in reversed(cuts[-MAX_CUT_TRIES:]):
                last = events[cut.end() - 1 :]
                if _are_events(last):
                    self.metadata.update(meta)
                    return [events[: cut.start() + 1], last]
            if _are_events(events):
                self.metadata.update(meta)
                return [events]
        raise StreamUnsupported("end of the event array")


def _are_events(text: bytes) -> bool:
    events = try_piece(text)
    return events is not None and all(e.ph for e in events)


def _send(worker: subprocess.Popen[bytes], piece: bytes) -> None:
    assert worker.stdin is not None
    worker.stdin.write(_LENGTH.pack(len(piece)))
    worker.stdin.write(piece)
    worker.stdin.flush()


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise StreamUnsupported("a decode worker ended early")
    return data


def _receive(worker: subprocess.Popen[bytes]) -> dict[str, pl.DataFrame]:
    """One piece's frames, or StreamUnsupported when the worker could not decode it."""
    assert worker.stdout is not None
    (tables,) = _LENGTH.unpack(_read_exact(worker.stdout, _LENGTH.size))
    if tables == UNSUPPORTED:
        raise StreamUnsupported("a piece the workers could not decode")
    frames = {}
    for _ in range(tables):
        (n,) = _LENGTH.unpack(_read_exact(worker.stdout, _LENGTH.size))
        name = _read_exact(worker.stdout, n).decode()
        (n,) = _LENGTH.unpack(_read_exact(worker.stdout, _LENGTH.size))
        frames[name] = pl.read_ipc(io.BytesIO(_read_exact(worker.stdout, n)))
    return frames


def write_frames(out: IO[bytes], frames: dict[str, pl.DataFrame] | None) -> None:
    """The worker's side of :func:`_receive`: Arrow IPC per table, length-prefixed."""
    if frames is None:
        out.write(_LENGTH.pack(UNSUPPORTED))
    else:
        out.write(_LENGTH.pack(len(frames)))
        for name, frame in frames.items():
            buf = io.BytesIO()
            frame.write_ipc(buf, compression="uncompressed")
            for blob in (name.encode(), buf.getvalue()):
                out.write(_LENGTH.pack(len(blob)))
                out.write(blob)
    out.flush()


def _start_workers(path: Path, workers: int) -> list[subprocess.Popen[bytes]]:
    # A plain interpreter running the worker module, not multiprocessing:
    # spawn and forkserver re-import the caller's __main__, which breaks
    # every script without an ``if __name__ == "__main__"`` guard.
    command = [sys.executable, "-m", "kinetolens.ingest.decode_worker", str(path)]
    return [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=worker_env())
        for _ in range(workers)
    ]


def _stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def parallel_kineto(path: Path, workers: int, piece_bytes: int = PIECE_BYTES) -> RawTables:
    """Read a well-formed Kineto JSON(.gz) file with ``workers`` decoding processes.

    Piece ``i`` goes to worker ``i % workers``; each worker has at most one
    piece outstanding, and its result is read before it gets the next, so
    neither side ever blocks on a full pipe while the other waits.
    Raises :class:`StreamUnsupported` for anything unusual; the caller then
    falls back to the serial readers, which produce the exact error.
    """
    pieces = _UncheckedPieces(file_blocks(path, min(1 << 20, piece_bytes)))
    parts: dict[str, list[pl.DataFrame]] = {name: [] for name in TABLES}
    procs = _start_workers(path, workers)
    outstanding: deque[subprocess.Popen[bytes]] = deque()

    def collect() -> None:
        for table, frame in _receive(outstanding.popleft()).items():
            parts[table].append(frame)

    try:
        for i, text in enumerate(pieces.texts(piece_bytes)):
            if len(outstanding) == workers:
                collect()
            worker = procs[i % workers]
            try:
                _send(worker, text)
            except OSError:
                raise StreamUnsupported("a decode worker could not be reached") from None
            outstanding.append(worker)
        while outstanding:
            collect()
    finally:
        _stop_workers(procs)
        close = getattr(pieces.blocks, "close", None)
        if close is not None:
            close()
    decoded = finish_tables(str(path), parts)
    return RawTables(format="kineto-json", metadata=pieces.metadata, warnings=decoded.warnings, **decoded.tables)
