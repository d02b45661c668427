"""The cache deletes only its own entries, checks what it reads,
keys on content, and never fails a load it cannot write."""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.cache import cache_entries, cache_key
from tests.conftest import trace_path

SMALL = "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"
OTHER = "hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz"


def _copy(tmp_path: Path, rel: str = SMALL) -> Path:
    src = trace_path(rel)
    dst = tmp_path / "traces" / src.name
    dst.parent.mkdir(exist_ok=True)
    shutil.copy(src, dst)
    return dst


def _cli(*args: str, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"),
            "KINETOLENS_CACHE_DIR": str(cache), "COLUMNS": "120", **env}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "kinetolens.cli.main", *args], env=full,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


@contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A real small file system at ``where`` (needs root and mount rights; skips otherwise)."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'mount failed'})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _foreign(cache: Path, outside: Path) -> list[Path]:
    """Things in the cache folder kinetolens did not write: a user's folder,
    a folder with an entry-like name holding a user's file, and a link with
    an entry-like name pointing at a folder outside."""
    (cache / "other").mkdir(parents=True)
    (cache / "other" / "precious.bin").write_bytes(b"x" * 50_000)
    lookalike = cache / ("ab" * 16)
    lookalike.mkdir()
    (lookalike / "notes.txt").write_text("mine")
    outside.mkdir()
    (outside / "ops.parquet").write_bytes(b"y" * 50_000)
    (cache / ("cd" * 16)).symlink_to(outside, target_is_directory=True)
    return [cache / "other" / "precious.bin", lookalike / "notes.txt", outside / "ops.parquet"]


def test_size_cap_and_clear_remove_only_the_caches_own_entries(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    precious = _foreign(cache, tmp_path / "outside")
    trace = _copy(tmp_path)
    done = _cli("summary", str(trace), cache=cache, KINETOLENS_CACHE_MAX_SIZE="1K")
    assert done.returncode == 0, done.stderr
    assert all(p.exists() for p in precious), "the size cap removed files it did not write"
    assert [e.key for e in cache_entries(cache)] == [cache_key(trace)], "the entry just written stays"
    assert (cache / ("cd" * 16)).is_symlink()
    other = _copy(tmp_path, OTHER)
    assert _cli("summary", str(other), cache=cache, KINETOLENS_CACHE_MAX_SIZE="1K").returncode == 0
    assert [e.key for e in cache_entries(cache)] == [cache_key(other)], "the older entry is pruned"
    cleared = _cli("cache", "clear", cache=cache)
    assert cleared.returncode == 0, cleared.stderr
    assert cleared.stdout.startswith("removed 1 entry ")
    assert all(p.exists() for p in precious), "cache clear removed files it did not write"
    assert cache_entries(cache) == []


def test_clear_on_a_read_only_folder_says_what_it_could_not_remove(tmp_path: Path) -> None:
    trace = _copy(tmp_path)
    with _tmpfs(tmp_path / "cache", "8m") as cache:
        kinetolens.load(trace, cache=cache)
        assert len(cache_entries(cache)) == 1
        ro = subprocess.run(["mount", "-o", "remount,ro", str(cache)], capture_output=True, text=True)
        if ro.returncode != 0:
            pytest.skip(f"cannot remount read-only ({ro.stderr.strip()})")
        done = _cli("cache", "clear", cache=cache)
        assert done.stdout.startswith("removed 0 entries (0 B)"), done.stdout
        assert "could not remove 1 entry" in done.stderr and "Read-only file system" in done.stderr
        assert done.returncode == 1
        assert len(cache_entries(cache)) == 1


def _damaged_then_rebuilt(trace: Path, cache: Path, caplog: pytest.LogCaptureFixture) -> kinetolens.Trace:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kinetolens.cache"):
        again = kinetolens.load(trace, cache=cache)
    lines = [r.getMessage() for r in caplog.records if r.name == "kinetolens.cache"]
    assert len(lines) == 1 and "damaged" in lines[0] and "rebuilding" in lines[0], lines
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kinetolens.cache"):
        kinetolens.load(trace, cache=cache)
    assert not [r for r in caplog.records if r.name == "kinetolens.cache"], "the rebuilt entry is good"
    return again


def test_an_entry_with_swapped_tables_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trace, cache = _copy(tmp_path), tmp_path / "cache"
    fresh = kinetolens.load(trace, cache=cache)
    entry = cache / cache_key(trace)
    ops, kernels = entry / "ops.arrow", entry / "kernels.arrow"
    ops.rename(entry / "swap"), kernels.rename(ops), (entry / "swap").rename(kernels)
    again = _damaged_then_rebuilt(trace, cache, caplog)
    assert again.ops.columns == fresh.ops.columns and again.kernels.equals(fresh.kernels)


def test_an_edited_meta_or_table_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trace, cache = _copy(tmp_path), tmp_path / "cache"
    fresh = kinetolens.load(trace, cache=cache)
    entry = cache / cache_key(trace)
    meta = entry / "meta.json"
    meta.write_bytes(meta.read_bytes().replace(b'"kineto-json"', b'"nsys-sqlite"'))
    assert _damaged_then_rebuilt(trace, cache, caplog).format == fresh.format == "kineto-json"
    kernels = entry / "kernels.arrow"
    pl.read_ipc(kernels.read_bytes()).with_columns(-pl.col("dur")).write_ipc(kernels, compression="zstd")
    again = _damaged_then_rebuilt(trace, cache, caplog)
    assert again.kernels.equals(fresh.kernels) and (again.kernels["dur"] >= 0).all()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_half_written_entries_of_dead_writers_are_removed_on_the_next_load(tmp_path: Path) -> None:
    trace, cache = _copy(tmp_path), tmp_path / "cache"
    kinetolens.load(trace, cache=cache)
    # A real writer killed with SIGKILL in the middle of writing an entry.
    script = (
        "import os, sys, kinetolens, kinetolens.cache as c\n"
        "trace = kinetolens.load(sys.argv[1], cache=False)\n"
        "real = c.write_entry\n"
        "def dying(entry, source, t):\n"
        "    real(entry, source, t)\n"
        "    os.kill(os.getpid(), 9)\n"
        "c.write_entry = dying\n"
        "c.write_keyed(c.Path(sys.argv[2]), 'f' * 32, 'x', trace)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    killed = subprocess.run([sys.executable, "-c", script, str(trace), str(cache)], env=env, timeout=120)
    assert killed.returncode == -9
    old = cache / ".tmp-abandoned"  # an older writer's name, from before pids were in it
    old.mkdir()
    (old / "ops.parquet").write_bytes(b"z" * 1000)
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    dead = cache / f".tmp-elsewhere-{_dead_pid()}-abc"  # another host's writer: only its age counts
    dead.mkdir()
    from kinetolens.cache import _tmp_prefix

    live = cache / f"{_tmp_prefix()}abc"  # this host, a writer still running (this test)
    live.mkdir()
    pending = [e for e in cache_entries(cache, pending=True) if not e.complete]
    assert len(pending) == 4 and sum(e.bytes for e in pending) > 1000, "half-written entries count"
    kinetolens.load(trace, cache=cache)  # a cache hit
    left = sorted(p.name for p in cache.iterdir() if p.name.startswith(".tmp-"))
    assert left == sorted([dead.name, live.name]), "the killed writer's and the hour-old entries are removed"


def test_a_plain_file_at_an_entrys_path_is_replaced_and_a_link_is_left(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trace, cache = _copy(tmp_path), tmp_path / "cache"
    cache.mkdir()
    (cache / cache_key(trace)).write_bytes(b"left by something")
    kinetolens.load(trace, cache=cache)
    assert [e.key for e in cache_entries(cache)] == [cache_key(trace)], "the file gave way to the entry"
    other = _copy(tmp_path, OTHER)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    (cache / cache_key(other)).symlink_to(target, target_is_directory=True)
    with caplog.at_level(logging.WARNING, logger="kinetolens.cache"):
        loaded = kinetolens.load(other, cache=cache)
    assert loaded.kernels.height > 0
    lines = [r.getMessage() for r in caplog.records if r.name == "kinetolens.cache"]
    assert len(lines) == 1 and "not a cache entry" in lines[0], lines
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"], "nothing written or removed through the link"


def test_same_size_and_mtime_with_other_content_is_not_served_from_the_cache(tmp_path: Path) -> None:
    trace, cache = tmp_path / "t.json", tmp_path / "cache"
    raw = gzip.decompress(trace_path(SMALL).read_bytes())
    name = next(n for n in kinetolens.load(trace_path(SMALL), cache=False).kernels["name"].unique() if len(n) > 4)
    trace.write_bytes(raw)
    st = trace.stat()
    before = kinetolens.load(trace, cache=cache)
    renamed = "Z" * len(name)
    trace.write_bytes(raw.replace(f'"{name}"'.encode(), f'"{renamed}"'.encode()))
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert trace.stat().st_size == st.st_size and trace.stat().st_mtime_ns == st.st_mtime_ns
    after = kinetolens.load(trace, cache=cache)
    assert name in before.kernels["name"].to_list()
    assert renamed in after.kernels["name"].to_list() and name not in after.kernels["name"].to_list()


def test_a_full_disk_under_the_cache_is_one_warning_and_the_analysis_goes_on(tmp_path: Path) -> None:
    trace = _copy(tmp_path)
    with _tmpfs(tmp_path / "cache", "16k") as cache:
        done = _cli("summary", str(trace), cache=cache)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr and "ComputeError" not in done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "cannot write the cache" in lines[0] and str(cache) in lines[0], lines
        assert "GPU" in done.stdout
        assert [p.name for p in cache.iterdir()] == [], "no half-written entry is left behind"
