"""Torch's C++ profiler log lines, kept off the user's terminal while profiling.

Every capture printed, unexplained, to file descriptor 2 (C++ logging that
``warnings`` cannot filter)::

    USDT:2026-11-28 04:41:52 5626:5626 SyncActivityProfilerHandler.cpp:52] profiler_start
    [W1128 ...CPUAllocator.cpp:245] Memory block of unknown size was allocated before the profiling started, ...

The first two are tracing probes' bookkeeping; the allocator line says what
the trace's memory figures already say (blocks allocated before the window
have no allocation event: the summary's peak reads "allocated while profiling
only").  While a profile runs, fd 2 goes through a pipe whose reader passes
every other line on unchanged, in order.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from typing import Any

#: Lines of torch's profiler that carry nothing for the user (see the module docstring).
QUIET = re.compile(
    r"^USDT:.*\] profiler_(start|stop)\s*$"
    r"|^\[W\S* \S+ CPUAllocator\.cpp:\d+\] Memory block of unknown size was allocated before the profiling started"
)


class QuietProfilerLogs:
    """Filter fd 2 between ``start`` and ``stop`` (no-op where fd 2 cannot be duplicated)."""

    def __init__(self) -> None:
        self._saved: int | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            saved = os.dup(2)
            read, write = os.pipe()
        except OSError:
            return
        self._saved = saved
        sys.stderr.flush()
        os.dup2(write, 2)
        os.close(write)
        self._thread = threading.Thread(target=self._pass_on, args=(read, saved), daemon=True, name="kinetolens-stderr")
        self._thread.start()

    def stop(self) -> None:
        if self._saved is None:
            return
        sys.stderr.flush()
        os.dup2(self._saved, 2)  # closes the pipe's last writer: the reader sees its end
        if self._thread is not None:
            self._thread.join(timeout=5)
        os.close(self._saved)
        self._saved = self._thread = None

    @staticmethod
    def _pass_on(read: int, out: int) -> None:
        with os.fdopen(read, "rb", buffering=0) as pipe:
            pending = b""
            while chunk := pipe.read(65536):
                *lines, pending = (pending + chunk).split(b"\n")
                _write(out, b"".join(line + b"\n" for line in lines if not QUIET.search(line.decode(errors="replace"))))
            if pending and not QUIET.search(pending.decode(errors="replace")):
                _write(out, pending)

    def __enter__(self) -> QuietProfilerLogs:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _write(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]
