"""kinetolens asks polars' allocator for one arena, only when it can and may.

Run in fresh interpreters: the setting only works before polars loads, so
the import order of the test process itself must not matter.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

SHOW = "import os; print(os.environ.get('_RJEM_MALLOC_CONF'))"


def _conf(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    out = subprocess.run([sys.executable, "-c", code + "; " + SHOW], env={**clean, **env}, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_one_arena_is_appended_to_polars_own_options() -> None:
    # polars sets its decay options at import and appends ours after them.
    conf = _conf("import kinetolens, polars")
    ours = ["narenas:1", "oversize_threshold:16384", "dirty_decay_ms:20", "muzzy_decay_ms:0"]
    assert conf.split(",")[-4:] == ours
    # polars' own decay options come first, so ours (read later) win.
    assert conf.index("dirty_decay_ms") < conf.index("dirty_decay_ms:20")


def test_nothing_is_set_once_polars_is_loaded() -> None:
    # jemalloc has read its options by then; setting them would only mislead
    # child processes.
    assert "narenas" not in _conf("import polars, kinetolens")


def test_a_value_the_user_set_is_kept() -> None:
    assert _conf("import kinetolens, polars", _RJEM_MALLOC_CONF="narenas:4").endswith("narenas:4")
    assert "narenas" not in _conf("import kinetolens, polars", _RJEM_MALLOC_CONF="")


FREED = """
import time
import kinetolens, polars as pl
def anon_mib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon"):
            return int(line.split()[1]) / 1024
base = anon_mib()
# 20,000 columns of 8 KB: small allocations, kept in jemalloc's own arena.
cols = [pl.Series(range(i, i + 1000)) for i in range(20000)]
held = anon_mib() - base
del cols
for _ in range(20):  # 0.2 s of a program that goes on allocating a little
    time.sleep(0.01)
    pl.Series(range(1000)).sum()
print(held, anon_mib() - base)
"""


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self/status")
@pytest.mark.parametrize("user_conf", [None, ""])
def test_freed_columns_leave_the_resident_size_within_a_fraction_of_a_second(user_conf: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    if user_conf is not None:
        env["_RJEM_MALLOC_CONF"] = user_conf  # polars' own decay: 0.5 s dirty, then 1 s "muzzy"
    out = subprocess.run([sys.executable, "-c", FREED], env=env, capture_output=True, text=True, check=True)
    held, left = map(float, out.stdout.split())
    assert held > 100  # ~160 MiB of columns were resident
    if user_conf is None:
        assert left < held / 4, (held, left)
    else:  # the control: with polars' defaults the freed pages are still resident
        assert left > held / 2, (held, left)


FAULTS = """
import resource, sys
from kinetolens._allocator import keep_freed_heap
if sys.argv[1] == "keep":
    keep_freed_heap()
def churn():
    # A reader piece's buffers: its text, the text joined for decoding and
    # its joined args, about a megabyte each, alive together, then freed.
    for i in range(200):
        text = b"x" * ((1 << 20) + 4096 * (i % 7))  # written, so its pages are touched
        joined = b"[" + text + b"]"
        args = text[: len(text) // 2]
        del text, joined, args
churn()  # first round: the heap grows to its working size
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, **env: str) -> int:
    out = subprocess.run([sys.executable, "-c", FAULTS, mode], env={**os.environ, **env}, capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_kept_heap_reuses_freed_megabyte_buffers() -> None:
    # glibc maps and unmaps each 1 MiB buffer (256 page faults apiece); with
    # the thresholds pinned, freed buffers are reused without faulting.
    default, kept = _faults("default"), _faults("keep")
    assert default > 200 * 100
    assert kept < default / 10


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_kept_heap_leaves_a_users_malloc_tuning_alone() -> None:
    tuned = _faults("keep", GLIBC_TUNABLES="glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072")
    assert tuned > 200 * 100
