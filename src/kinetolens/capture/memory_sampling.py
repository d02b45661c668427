"""Memory sampled every N ops, written into the trace as counter events.

``kinetolens.profile(sample_rate=N)`` installs :class:`MemorySampler`, a
``TorchDispatchMode`` that counts every aten op dispatched while the block
runs and, on every N-th one, records the time and the memory in use: the
CUDA caching allocator's allocated and reserved bytes where CUDA is in use,
else the process's resident set size (``/proc/self/statm``), the only
figure a CPU run has besides the profiler's own allocation records.
Without ``sample_rate`` no mode is installed, so ops pay nothing.

Samples are written into each window's trace before it is compressed, as
Chrome counter events (``ph: "C"``, name :data:`SAMPLE_EVENT`) that
Perfetto and chrome://tracing draw as a curve.  Timestamps use the trace's
own clock: ``ts`` in microseconds since the file's ``baseTimeNanoseconds``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

from kinetolens.formats import MEMORY_SAMPLE_EVENT as SAMPLE_EVENT

_TRACE_EVENTS = b'"traceEvents": ['


@dataclass(frozen=True)
class Sample:
    """One reading: wall clock (ns since the epoch), op count, bytes."""

    time_ns: int
    op_index: int
    allocated: int
    reserved: int | None


def _rss_bytes() -> int:
    """Resident set size of this process, from /proc (Linux); 0 elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class MemorySampler(TorchDispatchMode):
    """Counts dispatched ops and samples memory every ``rate``-th op while ``active``."""

    def __init__(self, rate: int, cuda: bool) -> None:
        super().__init__()
        if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
            raise ValueError(f"kinetolens.profile: sample_rate must be a positive integer, got {rate!r}")
        self.rate = rate
        self.cuda = cuda
        self.ops = 0
        self.samples: list[Sample] = []
        #: Whether samples are kept (the profiler is recording a window).
        self.active = True

    @property
    def device(self) -> str:
        return "cuda" if self.cuda else "cpu (process RSS)"

    def _read(self) -> tuple[int, int | None]:
        if self.cuda:
            import torch.cuda

            return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        return _rss_bytes(), None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops += 1
        if self.active and self.ops % self.rate == 0:
            allocated, reserved = self._read()
            self.samples.append(Sample(time.time_ns(), self.ops, allocated, reserved))
        return func(*args, **(kwargs or {}))

    def drain(self) -> list[Sample]:
        """The samples taken since the last call (one trace window's)."""
        out, self.samples = self.samples, []
        return out


def counter_events(samples: list[Sample], base_ns: int, pid: int, device: str) -> list[dict[str, Any]]:
    """Chrome counter events for ``samples`` on a trace whose clock starts at ``base_ns``."""
    events = []
    for s in samples:
        # op_index: the sample's place in the op count, from which a reader gets N.
        args: dict[str, Any] = {"allocated": s.allocated, "op_index": s.op_index}
        if s.reserved is not None:
            args["reserved"] = s.reserved
        events.append({
            "ph": "C", "name": SAMPLE_EVENT, "pid": pid, "tid": 0, "ts": (s.time_ns - base_ns) / 1000.0,
            "args": args, "cat": device,
        })  # fmt: skip
    return events


def insert_samples(path: Path, samples: list[Sample], device: str) -> None:
    """Insert ``samples`` at the start of the exported trace's ``traceEvents``."""
    data = path.read_bytes()
    at = data.find(_TRACE_EVENTS)
    if at < 0 or not samples:
        return
    head = data[: at + 4096]
    base_ns = 0
    key = b'"baseTimeNanoseconds":'
    if (k := head.find(key)) >= 0:
        digits = head[k + len(key) :].lstrip().split(b",", 1)[0].strip()
        base_ns = int(digits) if digits.isdigit() else 0
    events = counter_events(samples, base_ns, os.getpid(), device)
    body = ",\n".join(json.dumps(e) for e in events).encode()
    rest = data[at + len(_TRACE_EVENTS) :]
    sep = b",\n" if rest.lstrip()[:1] not in (b"]", b"") else b"\n"
    path.write_bytes(data[: at + len(_TRACE_EVENTS)] + b"\n" + body + sep + rest)
