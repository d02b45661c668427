"""polars' memory allocator, configured before polars loads: one arena.

polars allocates with jemalloc, which gives the threads of a process up to
four arenas per core, and memory freed into one arena is not reused by
another.  Loading a trace allocates and frees in turn on the main thread
(decoding) and on polars' worker threads (joins, sorts), so each arena keeps
its own freed memory and the process' peak grows by the sum.  With a single
arena the same load of ``df_index_resolver`` (51 MiB of JSON) peaks at
159 MiB instead of 176, in the same time on a 2-core machine
(``docs/BENCHMARKS.md``).

jemalloc reads its options once, from ``_RJEM_MALLOC_CONF``, when polars'
library loads; polars itself sets its decay options there at import and
appends whatever the variable already holds.  So this only takes effect
when kinetolens is imported before polars, and never overrides a value the
user set (set ``_RJEM_MALLOC_CONF`` to anything, even empty, to keep
jemalloc's defaults).
"""

from __future__ import annotations

import os
import sys

ALLOCATOR_ENV = "_RJEM_MALLOC_CONF"
ONE_ARENA = "narenas:1"


def configure_allocator() -> None:
    """Ask for one jemalloc arena if polars is not loaded yet and the user set nothing."""
    if "polars" not in sys.modules and ALLOCATOR_ENV not in os.environ:
        os.environ[ALLOCATOR_ENV] = ONE_ARENA
