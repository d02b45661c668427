"""Where traces go on disk: the layout torch-tb-profiler and kinetolens read.

``LOGDIR/RUN/WORKER.<unix_ms>.pt.trace.json.gz`` with WORKER ``<host>_<pid>``
(or ``<host>_rank<r>`` once torch.distributed is initialized, so files from
one job sort by rank), and the run metadata beside it as
``WORKER.<unix_ms>.kinetolens.json`` (a name the tb-profiler's file pattern
does not match, so it never mistakes it for a trace).

Files appear atomically (written under a dot-name, then renamed), so a
watcher never opens a half-written trace.

``kinetolens run`` gives every invocation its own run folder,
``LOGDIR/NAME/<YYYYmmdd-HHMMSS>`` (:func:`new_run_dir`), and points
``LOGDIR/NAME/latest`` at the newest one that holds traces
(:func:`point_latest`): running a script twice must not mix two runs' ranks
in one folder, and ``LOGDIR/NAME`` (or ``LOGDIR/NAME/latest``) still names
"the last run of this script" for every command.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kinetolens.formats import LATEST_RUN, TRACE_SUFFIX, metadata_name

#: Run folder names: the local start time, sortable as text.
RUN_STAMP = "%Y%m%d-%H%M%S"

# Level 6 is ~3x faster than gzip's default 9 on trace JSON for a file only
# a few percent larger; export time is time the profiled job stands still.
GZIP_LEVEL = 6


def distributed_rank() -> int | None:
    """This process's rank if torch.distributed is initialized, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return None


def worker_name(rank: int | None) -> str:
    """``<host>_rank<r>`` under torch.distributed, else ``<host>_<pid>``."""
    host = socket.gethostname()
    if rank is not None:
        return f"{host}_rank{rank}"
    return f"{host}_{os.getpid()}"


def metadata_path(trace: Path) -> Path:
    """The ``.kinetolens.json`` file that describes ``trace``."""
    return trace.with_name(metadata_name(trace.name))


def new_trace_path(run_dir: Path, worker: str) -> Path:
    """A fresh trace path stamped with the current time in milliseconds.

    Two windows closing within the same millisecond get consecutive stamps
    rather than overwriting each other.
    """
    stamp = int(time.time() * 1000)
    while True:
        path = run_dir / f"{worker}.{stamp}{TRACE_SUFFIX}"
        if not path.exists() and not metadata_path(path).exists():
            return path
        stamp += 1


def write_trace(path: Path, export: Callable[[str], None]) -> None:
    """Export a chrome trace via ``export(json_path)`` and gzip it to ``path``.

    torch's own ``.gz`` export goes through the system temp dir at gzip level
    9; we stage next to the destination (same filesystem, no /tmp size
    surprises) and compress at a faster level.
    """
    staging = path.with_name(f".{path.name}.partial.json")
    packed = path.with_name(f".{path.name}.partial")
    try:
        export(str(staging))
        with staging.open("rb") as src, gzip.open(packed, "wb", compresslevel=GZIP_LEVEL) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(packed, path)
    finally:
        for leftover in (staging, packed):
            leftover.unlink(missing_ok=True)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON, atomically."""
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def new_run_dir(logdir: Path, name: str) -> Path:
    """Create and return a fresh ``logdir/name/<start time>`` folder.

    Two runs started within the same second get ``-2``, ``-3``, ... suffixes:
    the folder is created here, so the name is taken atomically.
    """
    parent = logdir / name
    parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime(RUN_STAMP)
    for n in range(1, 10_000):
        path = parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{parent}: no free run folder name for {stamp}")


def point_latest(run_dir: Path) -> Path | None:
    """Point ``run_dir.parent/latest`` at ``run_dir`` (a relative link,
    replaced atomically); the link, or None where links cannot be made."""
    link = run_dir.parent / LATEST_RUN
    tmp = run_dir.parent / f".{LATEST_RUN}.{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run_dir.name, target_is_directory=True)
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)
        return None
    return link
