"""Rank traces and their caches on any fsspec URL (``s3://``, ``gs://``, ``file://``).

A run of a thousand ranks usually lives on an object store or a shared file
system that every worker of a cluster sees, not on the machine that asks for
the analysis.  Here a run directory or a cache directory may be an fsspec URL:

* the run is listed through fsspec, and its objects named as on disk
  (:func:`kinetolens.logdir.parse_trace_name`), without opening them;
* each worker copies its rank's object to a local temporary file, streamed in
  fixed chunks (memory stays bounded whatever the trace's size), and loads
  that file as usual: the decoder needs a seekable local file, and one
  sequential download is the fastest way to read an object store;
* the cache may be a URL too: an entry is the same files as a local
  entry, packed as one ``KEY.tar`` object so that a reader sees all of an
  entry or none of it.  On object stores a single put is atomic; elsewhere
  the object is written under a temporary name and moved into place.

The key of a remote trace is its URL with its size and its ETag or checksum
where the store gives one, else its modification time, so a changed object
is decoded again.  Plain local paths with a local cache take exactly the path
of :func:`kinetolens.load`.

fsspec comes with the ``dask`` extra; a store's own package (``s3fs``,
``gcsfs``, ...) is the user's to install, as for any fsspec URL.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import shutil
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kinetolens.cache import (
    EntryDamaged,
    cache_key,
    is_url,
    key_of,
    read_entry,
    read_keyed,
    write_entry,
    write_keyed,
)
from kinetolens.errors import TraceError
from kinetolens.loader import load
from kinetolens.logdir import parse_trace_name, trace_order, trace_suffix
from kinetolens.model import Trace

#: Stores where one put either lands whole or not at all.
ATOMIC_PUT = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory"})
#: Bytes per read when copying a trace to local disk.
COPY_CHUNK = 8 << 20
#: Info fields that change with an object's content, most reliable first.
CONTENT_TAGS = ("ETag", "etag", "md5Hash", "crc32c", "checksum", "md5")
MODIFIED = ("mtime", "LastModified", "last_modified", "updated", "created")


@dataclass(frozen=True)
class RemoteTrace:
    """One rank's trace object in a run at a URL (as :class:`~kinetolens.logdir.WorkerTrace`)."""

    run: str
    worker: str
    span: str | None
    rank: int | None
    url: str
    size: int


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec file system of ``url`` and the path within it; a one-line
    error for a protocol fsspec does not know or whose package is missing."""
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise TraceError(
            url, "URLs need fsspec: `pip install kinetolens[dask]`"
        ) from None
    try:
        return url_to_fs(url)
    except ImportError as exc:  # e.g. "Install s3fs to access S3"
        raise TraceError(url, f"this storage needs a package: {exc}") from None
    except ValueError as exc:
        raise TraceError(url, f"unknown storage protocol ({exc})") from None


def remote_rank_traces(url: str) -> list[RemoteTrace]:
    """The traces directly inside the run at ``url``, ordered as on disk."""
    fs, root = filesystem(url)
    try:
        info = fs.info(root)
        entries = fs.ls(root, detail=True) if info.get("type") == "directory" else []
    except FileNotFoundError:
        raise TraceError(url, "no such directory") from None
    except OSError as exc:
        raise TraceError(url, f"cannot list ({exc})") from None
    if info.get("type") != "directory":
        raise TraceError(url, "is a file, expected a run directory holding one trace per rank")
    run = posixpath.basename(root.rstrip("/"))
    found = []
    for e in entries:
        name = posixpath.basename(e["name"].rstrip("/"))
        parsed = parse_trace_name(name)
        if e.get("type") != "file" or parsed is None:
            continue
        worker, span, rank = parsed
        found.append(RemoteTrace(run, worker, span, rank, fs.unstrip_protocol(e["name"]), int(e.get("size") or 0)))
    if not found:
        raise TraceError(url, "holds no trace files (*.json, *.json.gz, *.sqlite)")
    return sorted(found, key=trace_order)  # type: ignore[arg-type]  # same fields


def source_identity(info: dict[str, Any], url: str) -> str | None:
    """What identifies this version of the object, or None where the store
    tells nothing that changes with the content (then it is not cached)."""
    tag = next((info[k] for k in CONTENT_TAGS if info.get(k)), None)
    stamp = next((info[k] for k in MODIFIED if info.get(k)), None)
    if tag is None and stamp is None:
        return None
    return f"{url}|{info.get('size')}|{tag if tag is not None else stamp}"


@contextmanager
def local_copy(fs: Any, path: str, suffix: str) -> Iterator[Path]:
    """``path`` of ``fs`` copied to a local temporary file, removed afterwards."""
    fd, tmp = tempfile.mkstemp(prefix="kinetolens-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as dst, fs.open(path, "rb") as src:
            shutil.copyfileobj(src, dst, COPY_CHUNK)
        yield Path(tmp)
    finally:
        Path(tmp).unlink(missing_ok=True)


class CacheStore(Protocol):
    def read(self, key: str, source: str) -> Trace | None: ...

    def write(self, key: str, source: str, trace: Trace) -> None: ...


@dataclass(frozen=True)
class LocalStore:
    """Today's cache directory on this machine (or a mounted shared one)."""

    root: Path

    def read(self, key: str, source: str) -> Trace | None:
        return read_keyed(self.root, key, source)

    def write(self, key: str, source: str, trace: Trace) -> None:
        write_keyed(self.root, key, source, trace)


class RemoteStore:
    """Cache entries as ``KEY.tar`` objects under an fsspec URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.fs, self.root = filesystem(url)

    def _object(self, key: str) -> str:
        return f"{self.root.rstrip('/')}/{key}.tar"

    def read(self, key: str, source: str) -> Trace | None:
        """The entry, or None.  Only an entry that does not decode is deleted:
        a network or credential error leaves it for the other workers."""
        obj = self._object(key)
        with tempfile.TemporaryDirectory(prefix="kinetolens-") as d:
            packed = Path(d) / "entry.tar"
            try:
                self.fs.get_file(obj, str(packed))
            except Exception:  # noqa: BLE001 - missing, or the store cannot be read now
                return None
            entry = Path(d) / "entry"
            entry.mkdir()
            try:
                with tarfile.open(packed, mode="r:") as tar:
                    _unpack_flat(tar, entry)
                return read_entry(entry, source)
            except (tarfile.TarError, ValueError, EntryDamaged):
                pass
        try:
            self.fs.rm(obj)
        except Exception:  # noqa: BLE001, S110 - someone else may have removed it
            pass
        return None

    def write(self, key: str, source: str, trace: Trace) -> None:
        """Best effort: a cache that cannot be written never fails the run."""
        final = self._object(key)
        try:
            with tempfile.TemporaryDirectory(prefix="kinetolens-") as d:
                entry, packed = Path(d) / "entry", Path(d) / "entry.tar"
                entry.mkdir()
                write_entry(entry, source, trace)
                with tarfile.open(packed, "w") as tar:
                    for f in sorted(entry.iterdir()):
                        tar.add(f, arcname=f.name)
                self.fs.makedirs(self.root, exist_ok=True)
                protocols = self.fs.protocol
                protocols = {protocols} if isinstance(protocols, str) else set(protocols)
                if protocols & ATOMIC_PUT:
                    self.fs.put_file(str(packed), final)
                else:
                    tmp = f"{self.root.rstrip('/')}/.tmp-{uuid.uuid4().hex}-{key}.tar"
                    self.fs.put_file(str(packed), tmp)
                    self.fs.mv(tmp, final)
        except Exception:  # noqa: BLE001 - storage errors vary by backend
            return


def _unpack_flat(tar: tarfile.TarFile, into: Path) -> None:
    """The regular files of an entry (plain names, no folders) into ``into``;
    anything else in the object is damage."""
    for member in tar:
        if not member.isfile() or "/" in member.name or member.name.startswith("."):
            raise ValueError(f"unexpected member {member.name!r} in a cache entry")
        src = tar.extractfile(member)
        if src is None:
            raise ValueError(f"unreadable member {member.name!r} in a cache entry")
        with open(into / member.name, "wb") as dst:
            shutil.copyfileobj(src, dst, COPY_CHUNK)


def cache_store(location: str | None) -> CacheStore | None:
    """The cache at ``location`` (a local directory or a URL); None: no cache."""
    if location is None:
        return None
    return RemoteStore(location) if is_url(location) else LocalStore(Path(location))


def load_source(source: str, cache: str | None) -> Trace:
    """One rank's trace from a local path or a URL, through a local or remote cache.

    A local path with a local (or no) cache is :func:`kinetolens.load` itself.
    """
    if not is_url(source) and (cache is None or not is_url(cache)):
        return load(source, cache=cache if cache is not None else False)
    store = cache_store(cache)
    if not is_url(source):
        path = Path(source)
        key = cache_key(path) if store is not None and path.is_file() else None
        cached = store.read(key, source) if store is not None and key else None
        if cached is not None:
            return cached
        trace = load(path, cache=False)
    else:
        fs, path_in_fs = filesystem(source)
        try:
            ident = source_identity(fs.info(path_in_fs), source)
        except FileNotFoundError:
            raise TraceError(source, "no such file") from None
        key = key_of(ident) if ident is not None else None
        cached = store.read(key, source) if store is not None and key else None
        if cached is not None:
            return cached
        suffix = trace_suffix(Path(posixpath.basename(path_in_fs))) or ""
        with local_copy(fs, path_in_fs, suffix) as local:
            try:
                trace = load(local, cache=False)
            except TraceError as exc:  # name the object, not the temporary copy
                raise TraceError(source, exc.problem) from None
        trace = dataclasses.replace(trace, path=source)  # frozen: a new Trace naming the object
    if store is not None and key:
        store.write(key, source, trace)
    return trace
