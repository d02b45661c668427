"""The cache of loaded traces: bounded, least recently used first, and never deleting
an entry it merely could not read."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import kinetolens
from kinetolens.cache import cache_entries, cache_key
from kinetolens.runs.storage import RemoteStore
from tests.conftest import trace_path

SMALL = [
    "hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz",
    "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "hta/triton_example/triton_example.json.gz",
]


def _copies(tmp_path: Path) -> list[Path]:
    out = []
    for rel in SMALL:
        src = trace_path(rel)
        dst = tmp_path / "traces" / src.name
        dst.parent.mkdir(exist_ok=True)
        shutil.copy(src, dst)
        out.append(dst)
    return out


def _age(entry: Path, seconds_ago: float) -> None:
    t = entry.stat().st_mtime - seconds_ago
    os.utime(entry, (t, t))


def test_the_cache_keeps_to_its_size_dropping_the_least_recently_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ~/.cache/kinetolens used to grow without bound.
    a, b, c = _copies(tmp_path)
    cache = tmp_path / "cache"
    kinetolens.load(a, cache=cache)
    kinetolens.load(b, cache=cache)
    _age(cache / cache_key(a), 20)
    _age(cache / cache_key(b), 10)
    sizes = {e.key: e.bytes for e in cache_entries(cache)}
    assert kinetolens.load(a, cache=cache) is not None  # a hit: `a` is now the most recently used
    # Room for the two largest entries, not for all three.
    monkeypatch.setenv("KINETOLENS_CACHE_MAX_SIZE", str(sum(sizes.values()) + 1))
    kinetolens.load(c, cache=cache)
    left = {e.key for e in cache_entries(cache)}
    assert left == {cache_key(a), cache_key(c)}, "b, the least recently used, goes first"
    assert sum(e.bytes for e in cache_entries(cache)) <= sum(sizes.values()) + 1
    # A limit smaller than one entry keeps only the entry just written.
    monkeypatch.setenv("KINETOLENS_CACHE_MAX_SIZE", "1K")
    kinetolens.load(b, cache=cache)
    assert {e.key for e in cache_entries(cache)} == {cache_key(b)}


def test_cache_info_and_clear(tmp_path: Path) -> None:
    # the user can see and empty the cache.
    a, b, _ = _copies(tmp_path)
    cache = tmp_path / "cache"
    kinetolens.load(a, cache=cache)
    kinetolens.load(b, cache=cache)
    env = {**os.environ, "KINETOLENS_CACHE_DIR": str(cache), "KINETOLENS_CACHE_MAX_SIZE": "2G"}

    def run(*args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "kinetolens.cli.main", "cache", *args], env=env, capture_output=True, text=True, check=True)
        return out.stdout

    info = run("info")
    assert f"cache: {cache}" in info and "entries: 2," in info and "limit: 2.0 GiB" in info
    assert run("clear").startswith("removed 2 entries")
    assert cache_entries(cache) == [] and "entries: 0, 0 B" in run("info")


class RefusingFS(MemoryFileSystem):
    """The memory store, except that reads fail while ``refuse`` is set: an
    object store whose credentials expired (S3 cannot run here)."""

    protocol = ("kl-refusing",)
    refuse = False

    def _open(self, path, mode="rb", **kwargs):  # type: ignore[no-untyped-def]
        if self.refuse and "r" in mode:
            raise PermissionError(f"{path}: access denied (credentials expired)")
        return super()._open(path, mode, **kwargs)


def test_a_store_that_cannot_be_read_keeps_its_entries(tmp_path: Path) -> None:
    # a network or credential error on one worker used
    # to delete the entry every other worker of the run shares.
    fsspec.register_implementation("kl-refusing", RefusingFS, clobber=True)
    trace = kinetolens.load(trace_path(SMALL[0]), cache=False)
    store = RemoteStore(f"kl-refusing:///kl-{uuid.uuid4().hex}")
    store.write("k", "src", trace)
    obj = store._object("k")
    try:
        RefusingFS.refuse = True
        assert store.read("k", "src") is None
        RefusingFS.refuse = False
        assert store.fs.exists(obj), "an unreadable entry is not a damaged one"
        again = store.read("k", "src")
        assert again is not None and again.kernels.equals(trace.kernels)
        # Damage still means: delete and rebuild.
        store.fs.pipe(obj, b"garbage")
        assert store.read("k", "src") is None and not store.fs.exists(obj)
    finally:
        RefusingFS.refuse = False
        store.fs.rm(store.root, recursive=True)
