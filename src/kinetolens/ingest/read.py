"""Any supported trace file to raw tables: the format is told by the content."""

from __future__ import annotations

from pathlib import Path

from kinetolens._allocator import KEEP_FREED_HEAP_FROM_BYTES, keep_freed_heap
from kinetolens.errors import TraceError
from kinetolens.ingest.kineto import RawTables
from kinetolens.ingest.kineto_file import read_kineto
from kinetolens.ingest.kineto_parallel import estimated_json_bytes, parallel_kineto, wants_parallel
from kinetolens.ingest.kineto_stream import stream_kineto
from kinetolens.ingest.nsys import read_nsys
from kinetolens.ingest.opener import StreamUnsupported, check_trace_file, open_trace_bytes
from kinetolens.ingest.plausible import check_device_properties, check_distributed_info, drop_far_off_events

SQLITE_MAGIC = b"SQLite format 3\x00"


def read_raw(path: str | Path) -> RawTables:
    """Decode any supported trace file into raw tables (format by content)."""
    p = Path(path)
    check_trace_file(p)
    try:
        with p.open("rb") as fh:
            head = fh.read(16)
    except FileNotFoundError:
        raise TraceError(p, "no such file") from None
    except IsADirectoryError:
        raise TraceError(p, "is a directory, expected a trace file") from None
    except OSError as exc:
        raise TraceError(p, f"cannot read file ({exc.strerror})") from None
    if head == SQLITE_MAGIC:
        return drop_far_off_events(read_nsys(p), str(p))  # its device properties are checked as they are read
    try:
        raw = check_distributed_info(check_device_properties(_read_kineto(p)))
        return drop_far_off_events(raw, str(p))
    except RecursionError:
        # msgspec stops at the interpreter's recursion limit (about 1,000
        # levels); no trace nests that deep, and no reader can isolate the
        # offending value without parsing through it.
        raise TraceError(p, "JSON nested too deeply (arrays/objects more than about 1,000 levels deep): not a trace") from None


def _read_kineto(p: Path) -> RawTables:
    if estimated_json_bytes(p) >= KEEP_FREED_HEAP_FROM_BYTES:
        keep_freed_heap()
    workers = wants_parallel(p)
    if workers:
        try:
            return parallel_kineto(p, workers)
        except StreamUnsupported:
            pass  # the serial readers below decide, and word any error exactly
    try:
        return stream_kineto(p)
    except StreamUnsupported:
        # Damaged, unusual or invalid: the whole-file reader recovers what
        # can be recovered and names exactly what is wrong.
        return read_kineto(open_trace_bytes(p))
