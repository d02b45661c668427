"""Cache of loaded traces, so a second load skips decoding.

Key: absolute path, size, mtime, a fingerprint of the content (the file's
first and last MiB, :mod:`kinetolens.fingerprint`) and a hash of the code
that shapes the tables; any change makes a new key, so a stale entry is
never read.  An entry is a directory named by its key (32 hex digits)
holding one Arrow IPC file per table (:data:`TABLE_SUFFIX`), ``meta.json``
(with each table's column names and dtypes) and ``checksum`` (a hash of
all of them), written to a temporary ``.tmp-HOST-PID-*`` directory and
renamed into place, so readers never see half an entry.  An entry that
does not decode, whose checksum or recorded schema does not match, or
whose tables are not the model's (:mod:`kinetolens.model.schema`), is
rebuilt with one warning line; one that cannot be read for another reason
(permissions, a failing disk or network) is left alone, as it may be good
for other readers.

The cache deletes only what it owns: a directory with a key's (or a
temporary entry's) name holding nothing but an entry's files, never
following a link; anything else in the folder is left alone.  Writing is
best effort: a full disk or a read-only folder is one warning line, and the
load goes on.  Half-written entries of a writer that died (its pid gone, or
older than an hour) are removed on the next load.

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
import logging
import os
import re
import socket
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import msgspec

from kinetolens import __version__
from kinetolens import json_codec
from kinetolens.registry.sizes import parse_size
from kinetolens.errors import TraceWarning, shown_path
from kinetolens.fingerprint import content_fingerprint

if TYPE_CHECKING:  # an entry's tables need them; its keys and derived results do not
    import polars as pl

    from kinetolens.model.trace import Trace

T = TypeVar("T")

ENV_DIR = "KINETOLENS_CACHE_DIR"
ENV_MAX_SIZE = "KINETOLENS_CACHE_MAX_SIZE"
DEFAULT_MAX_BYTES = 10 << 30
#: Half-written entries of a writer that died are removed after this long.
STALE_TMP_S = 3600
# ``s3://bucket/x``, ``file:///x``, chained ``simplecache::s3://...``
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*(://|::)")
#: Names the cache owns in its folder: entries, and entries being written.
_KEY_NAME = re.compile(r"^[0-9a-f]{32}$")
_TMP_NAME = re.compile(r"^\.tmp-(?:(?P<host>.+)-(?P<pid>\d+)-)?[A-Za-z0-9_]+$")
#: Files an entry holds; a directory holding anything else is not the cache's.
#: (``.parquet``: the tables of entries written before :data:`TABLE_SUFFIX`; such
#: entries are never read, their keys differ, but they are still pruned.)
_ENTRY_FILE = re.compile(r"^(?:[a-z_]+\.(?:arrow|parquet)|meta\.json|checksum|[a-z_]+\.derived\.json(?:\.tmp\d+)?)$")
#: Each table of an entry is an Arrow IPC file with zstd-compressed buffers:
#: written in about half the CPU time of zstd Parquet at its fastest level
#: (no page encoding) and a little smaller; a command reading it costs the
#: same (its repeated texts decode a little slower than Parquet's dictionaries).
TABLE_SUFFIX = ".arrow"
#: Part of every key: an entry written in another layout is never read.
ENTRY_LAYOUT = f"tables{TABLE_SUFFIX}+zstd"
#: A derived result stored beside an entry's tables (see :func:`read_derived`).
DERIVED_SUFFIX = ".derived.json"
CHECKSUM = "checksum"
#: The checksum file of an entry that holds derived results only: the trace
#: was too large to load whole, so no tables were stored (the key names the
#: file's path, size, time and content, which is what the results depend on).
DERIVED_ONLY = "derived-only"

log = logging.getLogger("kinetolens.cache")


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


@functools.cache
def analysis_fingerprint() -> str:
    """Hash of the code that computes derived results (the analyses and the
    registry's facts they use), so a changed analysis never reads a result
    an older one stored."""
    root = Path(__file__).parent
    digest = hashlib.sha256(__version__.encode())
    for sub in ("analysis", "registry"):
        for source in sorted((root / sub).rglob("*.py")):
            digest.update(str(source.relative_to(root)).encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def key_of(source_ident: str) -> str:
    """Cache key of a source identified by ``source_ident`` (where it is, and
    what changes when its content does: size and mtime, or an ETag)."""
    ident = f"{source_ident}|{_code_fingerprint()}|{ENTRY_LAYOUT}"
    # surrogateescape: a file name that is not UTF-8 keeps its own bytes
    return hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def cache_key(path: Path) -> str:
    """Key of a local trace file: where it is, its size, mtime and content fingerprint."""
    st = path.stat()
    fp = content_fingerprint(path, st.st_size)
    return key_of(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{fp}")


class EntryDamaged(Exception):
    """A cache entry's files are missing, do not decode or do not match: rebuild it."""


def _digest(files: dict[str, bytes]) -> str:
    """The checksum of an entry's files (names and bytes, in name order)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{len(files[name])}\0".encode())
        digest.update(files[name])
    return digest.hexdigest()


def _schema(frame: pl.DataFrame) -> list[list[str]]:
    """A table's column names and dtypes, as stored in ``meta.json``."""
    return [[name, str(dtype)] for name, dtype in frame.schema.items()]


def read_entry(entry: Path, source: str) -> Trace:
    """The trace stored in the entry directory ``entry``.

    Raises :class:`EntryDamaged` when a file is missing or does not decode,
    when the files do not match the checksum written with them, or a table
    does not have the columns and dtypes ``meta.json`` gives it or those of
    the model (:mod:`kinetolens.model.schema`); other
    ``OSError``s (the files cannot be read right now) pass through.
    """
    import polars as pl

    from kinetolens.model.schema import mismatch
    from kinetolens.model.trace import TABLES, Trace

    names = ["meta.json", *(f"{name}{TABLE_SUFFIX}" for name in TABLES)]
    try:
        files = {name: (entry / name).read_bytes() for name in names}
        stored = (entry / CHECKSUM).read_text("ascii").strip()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
        raise EntryDamaged(f"missing {Path(exc.filename or '?').name}") from exc
    except UnicodeDecodeError as exc:
        raise EntryDamaged("checksum file is not text") from exc
    if _digest(files) != stored:
        raise EntryDamaged("checksum does not match its files")
    try:
        meta = json.loads(files["meta.json"])
        tables = {name: pl.read_ipc(files[f"{name}{TABLE_SUFFIX}"]) for name in TABLES}
        for name, frame in tables.items():
            if _schema(frame) != meta["schema"][name]:
                raise EntryDamaged(f"{name}{TABLE_SUFFIX} does not have the {name} table's columns")
            problem = mismatch(name, frame)  # written by a model of other columns
            if problem is not None:
                raise EntryDamaged(problem)
        warnings = [TraceWarning(**w) for w in meta["warnings"]]
        return Trace(path=source, format=meta["format"], metadata=meta["metadata"], warnings=warnings, **tables)
    except EntryDamaged:
        raise
    except Exception as exc:  # noqa: BLE001 - Arrow, JSON and field errors all mean damage
        raise EntryDamaged(" ".join(f"{type(exc).__name__}: {exc}".split())[:200]) from exc


def write_entry(entry: Path, source: str, trace: Trace) -> None:
    """Write ``trace`` as an entry into the (existing, empty) directory ``entry``."""
    from kinetolens.model.trace import TABLES

    files: dict[str, bytes] = {}
    for name in TABLES:
        path = entry / f"{name}{TABLE_SUFFIX}"
        getattr(trace, name).write_ipc(path, compression="zstd")
        files[path.name] = path.read_bytes()
    meta = {
        "format": trace.format,
        "metadata": trace.metadata,
        "warnings": [dataclasses.asdict(w) for w in trace.warnings],
        "source": source,
        "schema": {name: _schema(getattr(trace, name)) for name in TABLES},
    }
    files["meta.json"] = msgspec.json.encode(meta)
    (entry / "meta.json").write_bytes(files["meta.json"])
    # last: an entry with its checksum is complete
    (entry / CHECKSUM).write_text(_digest(files), "ascii")


def _derived_path(entry: Path, name: str) -> Path:
    if not re.fullmatch(r"[a-z_]+", name):
        raise ValueError(f"not a derived result's name: {name!r}")
    return entry / f"{name}{DERIVED_SUFFIX}"


def read_derived(entry: Path, name: str, basis: str, into: type[T]) -> T | None:
    """The result ``name`` stored with the entry ``entry`` for ``basis``, or None.

    A derived result is costly to recompute (the summary, the
    recommendations with their simulated savings).  Its file holds one header
    line (the entry's checksum, ``basis`` and the checksum of the value) and
    the value as JSON; it is used only when the entry is the one it was
    computed from (the entry's ``checksum`` file, itself covering every
    table), it decodes into ``into`` (a result of an older shape does not), the basis (the analyses' code, what the load adds beside the
    cache) is the same, and its bytes match their checksum.  Anything else
    reads as None: the caller recomputes and stores it again.
    """
    try:
        path = _derived_path(entry, name)
        if not stat.S_ISDIR(entry.lstat().st_mode) or not stat.S_ISREG(path.lstat().st_mode):
            return None
        data = path.read_bytes()
        entry_sum = (entry / CHECKSUM).read_text("ascii").strip()
        head, _, body = data.partition(b"\n")
        header = json.loads(head)
        if header != {"entry": entry_sum, "basis": basis, "sha256": hashlib.sha256(body).hexdigest()}:
            return None
        value = json_codec.decode(body, into)
    except (OSError, ValueError, UnicodeDecodeError, msgspec.DecodeError):
        return None
    try:
        os.utime(entry)  # used now: the last to be pruned
    except OSError:
        pass
    return value


def derived_only_entry(cache_dir: Path, key: str) -> Path:
    """The entry ``key`` of ``cache_dir``, made as one that holds derived results
    only (:data:`DERIVED_ONLY`) when there is none yet.  Best effort: a cache
    that cannot be written gets no entry, and :func:`write_derived` stores nothing."""
    entry = cache_dir / key
    if os.path.lexists(entry):
        return entry
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(), dir=cache_dir))
        (tmp / CHECKSUM).write_text(DERIVED_ONLY, "ascii")
        try:
            os.rename(tmp, entry)
        except OSError:
            _remove_owned(tmp)  # another process made it first
    except OSError as exc:
        _warn(f"cannot write the cache in {cache_dir} ({exc.strerror or exc}); going on without it")
    return entry


def _derived_only(entry: Path) -> bool:
    try:
        return (entry / CHECKSUM).read_text("ascii").strip() == DERIVED_ONLY
    except (OSError, UnicodeDecodeError):
        return False


def write_derived(entry: Path, name: str, basis: str, value: object) -> None:
    """Store ``value`` as the derived result ``name`` of the entry ``entry``
    (see :func:`read_derived`).  Best effort, like every cache write: no
    entry (it could not be written) stores nothing, a failure is one warning
    line.  Written to a temporary file and renamed, so readers never see half
    of it."""
    try:
        path = _derived_path(entry, name)
        if not stat.S_ISDIR(entry.lstat().st_mode) or not _owned(entry):
            return
        entry_sum = (entry / CHECKSUM).read_text("ascii").strip()
    except OSError:
        return
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        body = json_codec.encode(value)
        header = {"entry": entry_sum, "basis": basis, "sha256": hashlib.sha256(body).hexdigest()}
        tmp.write_bytes(json.dumps(header).encode() + b"\n" + body)
        os.replace(tmp, path)
    except Exception as exc:  # noqa: BLE001 - a full disk, a value JSON cannot hold
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else " ".join(str(exc).split())[:160]
        _warn(f"cannot write the cache in {entry.parent} ({why}); going on without it")
        try:
            tmp.unlink()
        except OSError:
            pass


def read_cached(cache_dir: Path, path: Path) -> Trace | None:
    return read_keyed(cache_dir, cache_key(path), shown_path(path))


def _warn(message: str) -> None:
    """One line on stderr (through logging, so a program may route it)."""
    log.warning("kinetolens: %s", " ".join(message.split()))


def read_keyed(cache_dir: Path, key: str, source: str) -> Trace | None:
    """The entry ``key`` of the local ``cache_dir``, or None (missing, damaged or unreadable).

    A damaged entry is removed (one warning line) for the load to rebuild;
    half-written entries of dead writers are removed on the way.
    """
    remove_stale(cache_dir)
    entry = cache_dir / key
    try:
        if not stat.S_ISDIR(entry.lstat().st_mode):
            return None  # a link or a file: never read through it
    except OSError:
        return None
    if _derived_only(entry):
        return None  # results only, no tables: the load builds them
    try:
        trace = read_entry(entry, source)
    except EntryDamaged as exc:
        _warn(f"cache entry {entry} of {source} is damaged ({exc}): rebuilding it")
        remove_entry(entry)
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


def _host() -> str:
    """This machine's name as written into temporary entries' names (no ``-``)."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def _tmp_prefix() -> str:
    return f".tmp-{_host()}-{os.getpid()}-"


def write_keyed(cache_dir: Path, key: str, source: str, trace: Trace) -> None:
    """Store ``trace`` as entry ``key`` of the local ``cache_dir``, then prune
    the cache to its size limit.

    Best effort: any failure (a full disk, a quota, a read-only folder, a
    path that is not the cache's) is one warning line, and the load goes on.
    """
    tmp: Path | None = None
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        final = cache_dir / key
        if _derived_only(final):
            remove_entry(final)  # the tables are stored now; its results are recomputed against them
        if not _make_room_for(final, source):
            return
        tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(), dir=cache_dir))
        write_entry(tmp, source, trace)
        try:
            os.rename(tmp, final)
            tmp = None
        except OSError:
            pass  # another process won the race; its entry is as good as ours
        prune(cache_dir, max_cache_bytes(), keep=key)
    except Exception as exc:  # noqa: BLE001 - polars reports a full disk as ComputeError
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else " ".join(str(exc).split())[:160]
        _warn(f"cannot write the cache in {cache_dir} ({why}); going on without it")
    finally:
        if tmp is not None:
            _remove_owned(tmp)


def _make_room_for(final: Path, source: str) -> bool:
    """Whether an entry may be renamed to ``final``: nothing is there, or an
    entry (a writer that won a race), or a plain file under the key's name,
    which is removed.  A link or a folder that is not an entry stays, and
    ``source`` is not cached (one warning line)."""
    try:
        st = final.lstat()
    except FileNotFoundError:
        return True
    if stat.S_ISREG(st.st_mode):
        final.unlink()  # a name the cache owns; no entry is a plain file
        return True
    if stat.S_ISDIR(st.st_mode) and _owned(final):
        return True
    _warn(f"{final} is not a cache entry (a link or another folder): {source} is not cached")
    return False


def max_cache_bytes() -> int:
    """The local cache's size limit: ``$KINETOLENS_CACHE_MAX_SIZE`` (bytes, or
    with a K/M/G/T suffix), else 10 GiB."""
    size = parse_size(os.environ.get(ENV_MAX_SIZE))
    return DEFAULT_MAX_BYTES if size is None else size


@dataclass(frozen=True)
class CacheEntry:
    key: str
    bytes: int
    last_used: float  # seconds since the epoch
    #: False for an entry still being written (a ``.tmp-*`` folder).
    complete: bool = True


@dataclass(frozen=True)
class Removal:
    """What a prune or clear removed, and what it could not (with why)."""

    removed: list[CacheEntry]
    failed: list[tuple[CacheEntry, str]]


def _owned(path: Path) -> bool:
    """Whether the cache wrote ``path``: a real folder (not a link) with an
    entry's name holding only an entry's files (regular files, not links)."""
    if not (_KEY_NAME.match(path.name) or _TMP_NAME.match(path.name)):
        return False
    try:
        if not stat.S_ISDIR(path.lstat().st_mode):
            return False
        with os.scandir(path) as children:
            return all(_ENTRY_FILE.match(c.name) and c.is_file(follow_symlinks=False) for c in children)
    except OSError:
        return False


def _remove_owned(path: Path) -> str | None:
    """Remove an entry the cache owns, file by file (never through a link);
    None when it is gone, else why it is not."""
    if not _owned(path):
        return "not a cache entry" if os.path.lexists(path) else None
    error = None
    try:
        with os.scandir(path) as children:
            names = [c.name for c in children]
        for name in names:
            try:
                os.unlink(path / name)
            except FileNotFoundError:
                pass
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        error = exc.strerror or str(exc)
    if os.path.lexists(path):
        return error or "still there"
    return None


def remove_entry(entry: Path) -> bool:
    """Remove one entry the cache owns; whether it is gone."""
    return _remove_owned(entry) is None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process
    return True


def _stale(child: os.DirEntry[str], now: float) -> bool:
    """A half-written entry whose writer died (this host's pid is gone) or
    that is older than :data:`STALE_TMP_S`."""
    match = _TMP_NAME.match(child.name)
    if match is None:
        return False
    host, pid = match.group("host"), match.group("pid")
    if pid is not None and host == _host() and not _pid_alive(int(pid)):
        return True
    try:
        return now - child.stat(follow_symlinks=False).st_mtime > STALE_TMP_S
    except OSError:
        return False


def remove_stale(cache_dir: Path) -> list[CacheEntry]:
    """Remove the half-written entries of writers that died; returns them."""
    now = time.time()
    removed = []
    try:
        with os.scandir(cache_dir) as children:
            stale = [c for c in children if c.name.startswith(".tmp-") and _stale(c, now)]
    except OSError:
        return []
    for child in stale:
        size = _owned_bytes(child) or 0
        if _remove_owned(Path(child.path)) is None:
            removed.append(CacheEntry(child.name, size, 0.0, complete=False))
    return removed


def _owned_bytes(child: os.DirEntry[str]) -> int | None:
    """The bytes of ``child`` where it is an entry the cache owns (:func:`_owned`:
    a real folder holding only an entry's regular files), else None: one scan
    of the folder for both (every write prunes, and so reads every entry)."""
    try:
        if not child.is_dir(follow_symlinks=False):
            return None
        total = 0
        with os.scandir(child.path) as files:
            for f in files:
                if not (_ENTRY_FILE.match(f.name) and f.is_file(follow_symlinks=False)):
                    return None
                total += f.stat(follow_symlinks=False).st_size
        return total
    except OSError:
        return None


def cache_entries(cache_dir: Path, *, pending: bool = False) -> list[CacheEntry]:
    """The entries the cache owns in ``cache_dir``, least recently used
    first; with ``pending``, the ones being written too."""
    entries = []
    try:
        with os.scandir(cache_dir) as scan:
            children = list(scan)
    except OSError:
        return []
    for child in children:
        complete = _KEY_NAME.match(child.name) is not None
        if not (complete or (pending and _TMP_NAME.match(child.name))):
            continue
        size = _owned_bytes(child)
        if size is None:
            continue
        try:
            mtime = child.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue  # removed meanwhile
        entries.append(CacheEntry(child.name, size, mtime, complete))
    return sorted(entries, key=lambda e: (e.last_used, e.key))


def prune(cache_dir: Path, max_bytes: int, keep: str | None = None) -> Removal:
    """Remove the least recently used entries until the cache (entries being
    written included) holds at most ``max_bytes`` (never ``keep``, the entry
    just written, nor an entry still being written), and half-written
    entries left by writers that died."""
    removed = remove_stale(cache_dir)
    entries = cache_entries(cache_dir, pending=True)
    total = sum(e.bytes for e in entries)
    failed = []
    for entry in entries:
        if total <= max_bytes:
            break
        if entry.key == keep or not entry.complete:
            continue
        why = _remove_owned(cache_dir / entry.key)
        if why is None:
            total -= entry.bytes
            removed.append(entry)
        else:
            failed.append((entry, why))
    return Removal(removed, failed)


def clear(cache_dir: Path) -> Removal:
    """Remove every entry of a local cache (and dead writers' half-written ones)."""
    return prune(cache_dir, -1)
