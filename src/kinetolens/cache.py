"""Parquet cache of loaded traces, so a second load skips decoding.

Key: absolute path, size, mtime and kinetolens version; any change makes a
new key, so a stale entry is never read.  An entry is a directory of one
Parquet file per table plus ``meta.json``, written to a temporary directory
and renamed into place, so readers never see half an entry.  Anything wrong
with an entry (missing file, bad Parquet, bad JSON) means it is rebuilt.
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
from pathlib import Path

import msgspec
import polars as pl

from kinetolens import __version__
from kinetolens.errors import TraceWarning
from kinetolens.model.trace import TABLES, Trace

ENV_DIR = "KINETOLENS_CACHE_DIR"
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
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def cache_key(path: Path) -> str:
    st = path.stat()
    return key_of(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}")


def read_entry(entry: Path, source: str) -> Trace:
    """The trace stored in the entry directory ``entry``; raises on any damage."""
    meta = json.loads((entry / "meta.json").read_text())
    tables = {name: pl.read_parquet(entry / f"{name}.parquet") for name in TABLES}
    warnings = [TraceWarning(**w) for w in meta["warnings"]]
    return Trace(path=source, format=meta["format"], metadata=meta["metadata"], warnings=warnings, **tables)


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
    return read_keyed(cache_dir, cache_key(path), str(path))


def read_keyed(cache_dir: Path, key: str, source: str) -> Trace | None:
    """The entry ``key`` of the local ``cache_dir``, or None (missing or damaged)."""
    entry = cache_dir / key
    if not entry.is_dir():
        return None
    try:
        return read_entry(entry, source)
    except Exception:  # noqa: BLE001 - any damage means: rebuild the entry
        shutil.rmtree(entry, ignore_errors=True)
        return None


def write_cached(cache_dir: Path, path: Path, trace: Trace) -> None:
    """Best effort: a cache that cannot be written never fails a load."""
    write_keyed(cache_dir, cache_key(path), str(path), trace)


def write_keyed(cache_dir: Path, key: str, source: str, trace: Trace) -> None:
    """Store ``trace`` as entry ``key`` of the local ``cache_dir`` (best effort)."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        final = cache_dir / key
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir))
        write_entry(tmp, source, trace)
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process won the race; its entry is as good as ours.
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        return
