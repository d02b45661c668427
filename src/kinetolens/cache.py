"""Parquet cache of loaded traces, so a second load skips decoding.

Key: absolute path, size, mtime and kinetolens version; any change makes a
new key, so a stale entry is never read.  An entry is a directory of one
Parquet file per table plus ``meta.json``, written to a temporary directory
and renamed into place, so readers never see half an entry.  An entry that
does not decode (missing file, bad Parquet, bad JSON) is deleted and
rebuilt; one that cannot be read for another reason (permissions, a failing
disk or network) is left alone, as it may be good for other readers.

A local cache holds at most ``$KINETOLENS_CACHE_MAX_SIZE`` (default 10G):
every write removes the least recently used entries beyond that, a read
marks its entry used.  ``kinetolens cache info|clear`` shows and empties it.
The per-rank caches of ``kinetolens dist`` may also live at an fsspec URL
(:mod:`kinetolens.runs.storage` stores the same entries there).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
import polars as pl

from kinetolens import __version__
from kinetolens.errors import TraceWarning, shown_path
from kinetolens.model.trace import TABLES, Trace

ENV_DIR = "KINETOLENS_CACHE_DIR"
ENV_MAX_SIZE = "KINETOLENS_CACHE_MAX_SIZE"
DEFAULT_MAX_BYTES = 10 << 30
#: Half-written entries of a writer that died are removed after this long.
STALE_TMP_S = 3600
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
# ``s3://bucket/x``, ``file:///x``, chained ``simplecache::s3://...``
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*(://|::)")


def is_url(location: str | Path) -> bool:
    """Whether ``location`` is an fsspec URL rather than a local path."""
    return isinstance(location, str) and _URL.match(location) is not None


def default_cache_dir() -> Path:
    """The local cache directory.

    A URL in ``$KINETOLENS_CACHE_DIR`` is for the per-rank caches of
    ``kinetolens dist`` (see :func:`default_cache_location`); a single trace
    loaded on this machine keeps the local default rather than treating the
    URL as a relative path.
    """
    env = os.environ.get(ENV_DIR)
    if env and not is_url(env):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kinetolens"


def default_cache_location() -> str:
    """``$KINETOLENS_CACHE_DIR`` as given (a local path or an fsspec URL), else
    the local default."""
    env = os.environ.get(ENV_DIR)
    return env if env else str(default_cache_dir())


@functools.cache
def _code_fingerprint() -> str:
    """Hash of the code that shapes cached tables (ingest, model, and the
    loader, which adds the counter tables after the model is built).

    Part of the key so that a changed model never reads tables cached by an
    older one, even between releases.
    """
    root = Path(__file__).parent
    digest = hashlib.sha256(__version__.encode())
    for sub in ("ingest", "model"):
        for source in sorted((root / sub).glob("*.py")):
            digest.update(source.read_bytes())
    digest.update((root / "loader.py").read_bytes())
    return digest.hexdigest()[:16]


def key_of(source_ident: str) -> str:
    """Cache key of a source identified by ``source_ident`` (where it is, and
    what changes when its content does: size and mtime, or an ETag)."""
    ident = f"{source_ident}|{_code_fingerprint()}"
    # surrogateescape: a file name that is not UTF-8 keeps its own bytes
    return hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def cache_key(path: Path) -> str:
    st = path.stat()
    return key_of(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}")


class EntryDamaged(Exception):
    """A cache entry's files are missing or do not decode: rebuild it."""


def read_entry(entry: Path, source: str) -> Trace:
    """The trace stored in the entry directory ``entry``.

    Raises :class:`EntryDamaged` when a file is missing or does not decode;
    other ``OSError``s (the files cannot be read right now) pass through.
    """
    try:
        meta = json.loads((entry / "meta.json").read_bytes())
        tables = {name: pl.read_parquet(entry / f"{name}.parquet") for name in TABLES}
        warnings = [TraceWarning(**w) for w in meta["warnings"]]
        return Trace(path=source, format=meta["format"], metadata=meta["metadata"], warnings=warnings, **tables)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
        raise EntryDamaged(f"{entry}: missing {exc.filename}") from exc
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - Parquet, JSON and field errors all mean damage
        raise EntryDamaged(f"{entry}: {exc}") from exc


def write_entry(entry: Path, source: str, trace: Trace) -> None:
    """Write ``trace`` as an entry into the (existing, empty) directory ``entry``."""
    for name in TABLES:
        getattr(trace, name).write_parquet(entry / f"{name}.parquet", compression="zstd")
    meta = {
        "format": trace.format,
        "metadata": trace.metadata,
        "warnings": [dataclasses.asdict(w) for w in trace.warnings],
        "source": source,
    }
    (entry / "meta.json").write_bytes(msgspec.json.encode(meta))


def read_cached(cache_dir: Path, path: Path) -> Trace | None:
    return read_keyed(cache_dir, cache_key(path), shown_path(path))


def read_keyed(cache_dir: Path, key: str, source: str) -> Trace | None:
    """The entry ``key`` of the local ``cache_dir``, or None (missing, damaged or unreadable)."""
    entry = cache_dir / key
    if not entry.is_dir():
        return None
    try:
        trace = read_entry(entry, source)
    except EntryDamaged:
        shutil.rmtree(entry, ignore_errors=True)
        return None
    except OSError:
        return None  # not this entry's fault: leave it for other readers
    try:
        os.utime(entry)  # used now: the last to be pruned
    except OSError:
        pass
    return trace


def write_cached(cache_dir: Path, path: Path, trace: Trace) -> None:
    """Best effort: a cache that cannot be written never fails a load."""
    write_keyed(cache_dir, cache_key(path), shown_path(path), trace)


def write_keyed(cache_dir: Path, key: str, source: str, trace: Trace) -> None:
    """Store ``trace`` as entry ``key`` of the local ``cache_dir`` (best effort),
    then prune the cache to its size limit."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        final = cache_dir / key
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir))
        try:
            write_entry(tmp, source, trace)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process won the race; its entry is as good as ours.
            shutil.rmtree(tmp, ignore_errors=True)
        prune(cache_dir, max_cache_bytes(), keep=key)
    except OSError:
        return


def max_cache_bytes() -> int:
    """The local cache's size limit: ``$KINETOLENS_CACHE_MAX_SIZE`` (bytes, or
    with a K/M/G/T suffix), else 10 GiB."""
    value = os.environ.get(ENV_MAX_SIZE)
    match = _SIZE.match(value) if value else None
    if match is None:
        return DEFAULT_MAX_BYTES
    number, unit = match.groups()
    return int(float(number) * (1 << (10 * "BKMGT".index(unit.upper() or "B"))))


@dataclass(frozen=True)
class CacheEntry:
    key: str
    bytes: int
    last_used: float  # seconds since the epoch


def cache_entries(cache_dir: Path) -> list[CacheEntry]:
    """The complete entries of a local cache, least recently used first."""
    entries = []
    try:
        children = list(os.scandir(cache_dir))
    except OSError:
        return []
    for child in children:
        if child.name.startswith(".") or not child.is_dir(follow_symlinks=False):
            continue
        try:
            size = sum(f.stat().st_size for f in os.scandir(child.path) if f.is_file(follow_symlinks=False))
            entries.append(CacheEntry(child.name, size, child.stat().st_mtime))
        except OSError:
            continue  # removed meanwhile
    return sorted(entries, key=lambda e: (e.last_used, e.key))


def prune(cache_dir: Path, max_bytes: int, keep: str | None = None) -> list[CacheEntry]:
    """Remove the least recently used entries until the cache holds at most
    ``max_bytes`` (never ``keep``, the entry just written), and half-written
    entries left by writers that died.  Returns the entries removed."""
    now = time.time()
    for child in cache_dir.glob(".tmp-*"):
        try:
            if now - child.stat().st_mtime > STALE_TMP_S:
                shutil.rmtree(child, ignore_errors=True)
        except OSError:
            continue
    entries = cache_entries(cache_dir)
    total = sum(e.bytes for e in entries)
    removed = []
    for entry in entries:
        if total <= max_bytes:
            break
        if entry.key == keep:
            continue
        shutil.rmtree(cache_dir / entry.key, ignore_errors=True)
        total -= entry.bytes
        removed.append(entry)
    return removed


def clear(cache_dir: Path) -> list[CacheEntry]:
    """Remove every entry of a local cache; returns them."""
    return prune(cache_dir, -1)
