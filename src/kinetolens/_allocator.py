"""polars' memory allocator and glibc's malloc, tuned for loading a trace,
in kinetolens' own processes only.

The ``kinetolens`` command calls :func:`tune_allocator` before anything
imports polars (polars then loads with the options whenever something first
imports it, so a command that needs no polars, such as a summary read back
from the cache, never loads it), and the decode workers of big traces start
with the same options (:func:`worker_env`).  ``import kinetolens`` tunes nothing: a
training job's DataLoader workers, torchrun children and the user's own
polars code keep their defaults.  A program that loads big traces itself may
opt in by calling ``kinetolens.tune_allocator()`` before importing polars.

Why: loading a trace allocates and frees in turn on the main thread
(decoding) and on polars' worker threads (joins, sorts), and frees columns
faster than jemalloc's decay returns pages.  With polars' defaults each of
up to four arenas per core keeps its own freed memory, and freed pages stay
resident for up to 1.5 s, so the peak grows by what is kept.
:data:`ALLOCATOR_OPTIONS` asks for one arena, returns large allocations at
once and purges freed pages within 20 ms (measured effect on peak memory and
time: ``docs/BENCHMARKS.md``, "Memory").

jemalloc reads its options once, from ``_RJEM_MALLOC_CONF``, when polars'
library loads; polars itself sets its decay options there at import and
appends whatever the variable already holds (later options win).  So the
tuning only takes effect before polars is imported, and never overrides a
value the user set (set ``_RJEM_MALLOC_CONF`` to anything, even empty, to
keep polars' defaults).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
from types import ModuleType
from typing import Any

ALLOCATOR_ENV = "_RJEM_MALLOC_CONF"
ONE_ARENA = "narenas:1"
#: Allocations from 16 KiB up (jemalloc's smallest "large" size; its default
#: threshold is 8 MiB) are served by jemalloc's arena for oversize requests,
#: which returns freed extents to the kernel at once instead of keeping them
#: for reuse: a model build and summary free many columns of a few tens of
#: KiB to a few MiB whose extents, kept, rarely fit the next request.
OVERSIZE = "oversize_threshold:16384"
#: Dirty pages purged after 20 ms instead of polars' 500, muzzy ones at once
#: (``MADV_DONTNEED``, so the resident size drops): a load frees columns far
#: faster than polars' decay.  Not 0 ms: every free would then cost a system
#: call.
DECAY = "dirty_decay_ms:20,muzzy_decay_ms:0"
ALLOCATOR_OPTIONS = f"{ONE_ARENA},{OVERSIZE},{DECAY}"


#: What polars itself puts in front of the variable at import, once per
#: polars process in a chain of parents.
_POLARS_OWN = re.compile(r"^(?:dirty_decay_ms:500,muzzy_decay_ms:1000(?:,thp:always,metadata_thp:always)?(?:,|$))+")
_tuned = False
_user_declined = False


def tune_allocator() -> bool:
    """Opt this process into kinetolens' allocator tuning; returns whether
    jemalloc's options will take effect.

    When polars is not loaded yet and the user set no ``_RJEM_MALLOC_CONF``,
    polars loads with :data:`ALLOCATOR_OPTIONS` when it is first imported
    (:class:`_TunedImport`); the environment holds them only during that
    import, so child processes (a script under ``kinetolens run``) start with
    their own defaults.  Also lets :func:`keep_freed_heap` act.
    """
    global _tuned, _user_declined
    _tuned = True
    if ALLOCATOR_ENV in os.environ and "polars" not in sys.modules:
        _user_declined = True
    if "polars" in sys.modules or _user_declined:
        return False
    if not any(isinstance(finder, _TunedImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _TunedImport())
    return True


class _TunedImport(importlib.abc.MetaPathFinder):
    """Finds polars as the other finders do, once, and has it loaded with
    :data:`ALLOCATOR_OPTIONS` in the environment (jemalloc reads them then,
    once), restored as soon as the import is done."""

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "polars":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _LoadWithOptions(spec.loader)
        return spec


class _LoadWithOptions(importlib.abc.Loader):
    """``loader``, running the module with the allocator options set."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if ALLOCATOR_ENV in os.environ:  # set since tune_allocator: the user's choice
            self.loader.exec_module(module)
            return
        os.environ[ALLOCATOR_ENV] = ALLOCATOR_OPTIONS
        try:
            self.loader.exec_module(module)
        finally:
            os.environ.pop(ALLOCATOR_ENV, None)

    def __getattr__(self, name: str) -> Any:  # resource readers and the like: the real loader's
        return getattr(self.loader, name)


def worker_env() -> dict[str, str] | None:
    """Environment for kinetolens' own worker processes: this one's, plus
    :data:`ALLOCATOR_OPTIONS` unless the user set the variable (None: inherit)."""
    value = os.environ.get(ALLOCATOR_ENV)
    if _user_declined or (value is not None and _POLARS_OWN.sub("", value) != ""):
        return None
    return {**os.environ, ALLOCATOR_ENV: ALLOCATOR_OPTIONS}


#: glibc ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: The largest values glibc's own dynamic thresholds grow to on 64-bit
#: (``DEFAULT_MMAP_THRESHOLD_MAX``, and twice that for trimming).
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 64 << 20
#: Uncompressed trace size from which :func:`keep_freed_heap` pays off.
KEEP_FREED_HEAP_FROM_BYTES = 256 << 20
_USER_MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
_heap_kept = False


def keep_freed_heap() -> None:
    """Let glibc keep freed buffers of up to 32 MiB for reuse instead of
    returning them to the kernel, for the rest of the process.

    The Kineto reader works through a big trace one megabyte piece at a time,
    and each piece's text, joined args and decoded objects are buffers of
    about that size.  glibc maps and unmaps such buffers each time (its
    dynamic thresholds settle around the size of the last freed one and trim
    the heap above twice that), so every piece's buffers are page-faulted
    afresh.  Pinning the thresholds at the
    values glibc's own rule grows to keeps them for reuse.  The cost is up
    to 64 MiB of freed heap kept, worth it only beside a big trace's tables,
    so the reader calls this for files from 256 MiB of JSON.  No-op unless
    :func:`tune_allocator` was called (the command and the decode workers
    do), off glibc, and when the user tuned malloc through the environment.
    """
    global _heap_kept
    if not _tuned or _heap_kept or not sys.platform.startswith("linux"):
        return
    _heap_kept = True
    if any(k in os.environ for k in _USER_MALLOC_ENV) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
