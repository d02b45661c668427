"""Parquet cache of loaded traces, so a second load skips decoding.

Key: absolute path, size, mtime and kinetolens version; any change makes a
new key, so a stale entry is never read.  An entry is a directory of one
Parquet file per table plus ``meta.json``, written to a temporary directory
and renamed into place, so readers never see half an entry.  Anything wrong
with an entry (missing file, bad Parquet, bad JSON) means it is rebuilt.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import msgspec
import polars as pl

from kinetolens import __version__
from kinetolens.errors import TraceWarning
from kinetolens.model.trace import TABLES, Trace

ENV_DIR = "KINETOLENS_CACHE_DIR"


def default_cache_dir() -> Path:
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kinetolens"


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


def cache_key(path: Path) -> str:
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{_code_fingerprint()}"
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def read_cached(cache_dir: Path, path: Path) -> Trace | None:
    entry = cache_dir / cache_key(path)
    if not entry.is_dir():
        return None
    try:
        meta = json.loads((entry / "meta.json").read_text())
        tables = {name: pl.read_parquet(entry / f"{name}.parquet") for name in TABLES}
        warnings = [TraceWarning(**w) for w in meta["warnings"]]
        return Trace(
            path=str(path), format=meta["format"], metadata=meta["metadata"], warnings=warnings, **tables
        )
    except Exception:  # noqa: BLE001 - any damage means: rebuild the entry
        shutil.rmtree(entry, ignore_errors=True)
        return None


def write_cached(cache_dir: Path, path: Path, trace: Trace) -> None:
    """Best effort: a cache that cannot be written never fails a load."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        final = cache_dir / cache_key(path)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir))
        for name in TABLES:
            getattr(trace, name).write_parquet(tmp / f"{name}.parquet", compression="zstd")
        meta = {
            "format": trace.format,
            "metadata": trace.metadata,
            "warnings": [dataclasses.asdict(w) for w in trace.warnings],
            "source": str(path),
        }
        (tmp / "meta.json").write_bytes(msgspec.json.encode(meta))
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process won the race; its entry is as good as ours.
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        return
