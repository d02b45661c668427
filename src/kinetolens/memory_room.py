"""Whether a trace read whole fits in the memory this process may use.

A Kineto file read whole takes about its own (uncompressed) size in memory
(docs/BENCHMARKS.md: 1.0x at 2 GB for the load and summary).  A file that
cannot fit would be killed by the kernel's out-of-memory killer, or make
the machine swap, long after the reading started and with no word; instead
the load stops at once with one line saying so, and pointing at what does
fit: ``kinetolens summary``, ``report``, ``ops``, ``kernels``, ``critical-path`` and
``whatif`` read large traces with ``ProfilerStep`` ranges a step window at a
time.  Kineto JSON files under
:data:`CHECKED_FROM_BYTES` are not checked (nor other formats: the cache
entry of a trace already read is not either); ``KINETOLENS_NO_MEMORY_CHECK=1``
turns the check off.
"""

from __future__ import annotations

import os
from pathlib import Path

from kinetolens.errors import TraceError
from kinetolens.ingest.kineto_parallel import estimated_json_bytes

#: Files of less JSON than this are read without a look at the memory.
CHECKED_FROM_BYTES = 1_000_000_000
#: What a whole read holds besides the tables: the interpreter and libraries.
BASE_BYTES = 300_000_000

__all__ = ["CHECKED_FROM_BYTES", "check_room", "free_bytes", "needed_bytes"]


def needed_bytes(json_bytes: int) -> int:
    """About what reading ``json_bytes`` of Kineto JSON whole takes at its peak."""
    return json_bytes + BASE_BYTES


def free_bytes(meminfo: str = "/proc/meminfo", cgroup: str = "/sys/fs/cgroup") -> int | None:
    """Memory this process may still take: the machine's available memory,
    or its cgroup's room where that is less (a container; cgroup v2 or v1);
    None where neither can be read (not Linux)."""
    room = []
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                room.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    # cgroup v2 (memory.max, "max" where unlimited), else v1 (a huge limit where unlimited)
    for limit_file, used_file in (("memory.max", "memory.current"), ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            limit = Path(cgroup, limit_file).read_text().strip()
            if limit != "max":
                room.append(int(limit) - int(Path(cgroup, used_file).read_text()))
            break
        except (OSError, ValueError):
            continue
    return min(room) if room else None


def check_room(path: Path, free: int | None = None) -> None:
    """Raise a one-line :class:`TraceError` when reading ``path`` whole would
    not fit in ``free`` bytes (default: :func:`free_bytes`)."""
    if os.environ.get("KINETOLENS_NO_MEMORY_CHECK") == "1" or not path.name.lower().endswith((".json", ".json.gz")):
        return
    json_bytes = estimated_json_bytes(path)
    if json_bytes < CHECKED_FROM_BYTES:
        return
    free = free_bytes() if free is None else free
    need = needed_bytes(json_bytes)
    if free is None or need <= free:
        return
    raise TraceError(
        path,
        f"reading its {json_bytes / 1e9:,.1f} GB of JSON whole needs about {need / 1e9:,.1f} GB of memory and "
        f"{max(free, 0) / 1e9:,.1f} GB is free (kinetolens summary, report, ops, kernels, critical-path and whatif read a "
        "trace with ProfilerStep ranges a step window at a time; KINETOLENS_NO_MEMORY_CHECK=1 reads it whole anyway)",
    )
