"""Record the CUDA caching allocator's history while profiling, and dump its snapshot.

``kinetolens.profile(memory_snapshot=True)`` turns on
``torch.cuda.memory._record_memory_history`` for the profile, writes the
snapshot (``torch.cuda.memory._dump_snapshot``: a pickle that
pytorch.org/memory_viz and ``kinetolens memory`` read) beside each trace,
and, through torch's out-of-memory observer, writes one when an
allocation fails, before the error reaches the training code, naming the
file on stderr.  The snapshot holds the last :data:`MAX_ENTRIES` allocator
actions with their Python stacks.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kinetolens.formats import SNAPSHOT_SUFFIX, snapshot_name

#: Allocator actions the history keeps (a ring buffer: the newest are kept).
MAX_ENTRIES = 100_000

__all__ = ["MAX_ENTRIES", "SnapshotRecorder", "snapshot_path"]


def snapshot_path(trace: Path) -> Path:
    """The snapshot written beside ``trace``."""
    return trace.with_name(snapshot_name(trace.name))


class SnapshotRecorder:
    """The allocator's history from :meth:`start` to :meth:`stop`; an out-of-memory
    error in between dumps a snapshot into ``run_dir`` first."""

    def __init__(self, run_dir: Path, worker: str) -> None:
        self.run_dir, self.worker = run_dir, worker
        self.recording = False

    def start(self) -> None:
        import torch

        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES)
        self.recording = True
        # torch keeps observers for the life of the process: this one does nothing once stopped.
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is not None:
            attach(self._on_oom)

    def dump(self, path: Path) -> Path:
        import torch

        torch.cuda.memory._dump_snapshot(str(path))
        return path

    def stop(self) -> None:
        import torch

        if self.recording:
            self.recording = False
            torch.cuda.memory._record_memory_history(enabled=None)

    def _on_oom(self, device: int, alloc: int, device_allocated: int, device_free: int, *_: Any) -> None:
        if not self.recording:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path = self.dump(self.run_dir / f"{self.worker}.oom{SNAPSHOT_SUFFIX}")
        print(
            f"kinetolens: out of memory on cuda:{device} allocating {alloc:,} bytes "
            f"({device_allocated:,} allocated, {device_free:,} free): memory snapshot written to {path}",
            file=sys.stderr,
            flush=True,
        )
