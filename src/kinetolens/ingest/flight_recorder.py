"""PyTorch flight recorder dumps: the last collectives of each rank.

With ``TORCH_FR_BUFFER_SIZE`` (or ``TORCH_NCCL_TRACE_BUFFER_SIZE``) set, each
process group backend records its recent collectives in a ring buffer (Gloo
too, as in torch 2.13); a watchdog timeout, or a call to
``torch._C._distributed_c10d._dump_fr_trace()``, writes it to one file per
rank (``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + rank, by default
``/tmp/nccl_trace_rank_N``).  The file is a pickle of a dict with
``version``, ``pg_config``, ``pg_status`` and ``entries``; the same dict
comes as JSON from ``_dump_fr_trace_json`` and the debug HTTP handler.  Both
are read here.

A dump is untrusted input and pickle runs code by design: the unpickler
below builds plain containers only (dict, list, tuple, str, int, float,
bool, None, bytes) and refuses any pickle that names a class or function,
before anything is called.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinetolens.errors import TraceError

#: Types a dump is made of; anything else is refused.
PLAIN = (dict, list, tuple, str, int, float, bool, bytes, type(None))
#: A dump's file name ends in its rank (torch's own reader infers it the same way).
RANK_NAME = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle))?$")
#: Collective states the recorder writes.
STATES = ("scheduled", "started", "completed")


class _Forbidden(pickle.UnpicklingError):
    """A pickle that would build something other than plain data."""


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles containers and scalars; a global (class, function) or a
    persistent id is an error, so no reduce can call anything."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Forbidden(f"it names {module}.{name}, which a flight recorder dump never does")

    def persistent_load(self, pid: Any) -> Any:
        raise _Forbidden("it holds a persistent id, which a flight recorder dump never does")


@dataclass(frozen=True)
class GroupConfig:
    """One process group as a rank's recorder knows it."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class GroupStatus:
    """A process group's counters at dump time (collective sequence ids, -1: none)."""

    last_enqueued: int
    last_started: int
    last_completed: int


@dataclass(frozen=True)
class Entry:
    """One recorded collective or point-to-point call."""

    record_id: int
    pg_id: int
    group: str
    group_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    profiling_name: str
    is_p2p: bool
    state: str
    retired: bool
    time_created_ns: int
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]

    @property
    def op(self) -> str:
        """The call without its backend: ``all_reduce``, ``send 0->1``."""
        return self.profiling_name.split(":", 1)[-1]

    @property
    def backend(self) -> str:
        return self.profiling_name.split(":", 1)[0] if ":" in self.profiling_name else ""


@dataclass(frozen=True)
class RankDump:
    """One rank's flight recorder dump."""

    rank: int
    path: str
    version: str
    groups: dict[str, GroupConfig]
    #: Keyed by the rank-local ``pg_id``.
    status: dict[int, GroupStatus]
    #: In recording order (oldest first).
    entries: tuple[Entry, ...]


def _plain(value: Any, depth: int = 0) -> bool:
    if depth > 64 or not isinstance(value, PLAIN):
        return False
    if isinstance(value, dict):
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain(v, depth + 1) for v in value)
    return True


def decode(path: str, data: bytes) -> dict[str, Any]:
    """The dump's dict, from its pickle or JSON bytes; refuses anything but plain data."""
    head = data.lstrip()[:1]
    try:
        if head == b"{":
            raw = json.loads(data)
        else:
            raw = _PlainUnpickler(io.BytesIO(data)).load()
    except _Forbidden as exc:
        raise TraceError(path, f"refused: not a plain flight recorder pickle ({exc})") from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        IndexError,
        KeyError,
        TypeError,
        OverflowError,
        MemoryError,
        RecursionError,
    ) as exc:
        what = "JSON" if head == b"{" else "pickle"
        why = str(exc) or type(exc).__name__
        raise TraceError(
            path,
            f"not a readable flight recorder dump: truncated or damaged {what} ({why})",
        ) from None
    if not isinstance(raw, dict) or not _plain(raw):
        raise TraceError(path, "refused: not a flight recorder dump (a dict of plain values)")
    if "entries" not in raw or "version" not in raw:
        raise TraceError(path, "not a flight recorder dump: it has no 'entries' or 'version'")
    return raw


def _int(path: str, where: str, value: Any) -> int:
    """Sequence ids are ints in torch's dumps, strings in its JSON status and tests."""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise TraceError(path, f"{where} is {value!r}, not an integer")


def _sizes(path: str, where: str, value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(s, (list, tuple)) for s in value):
        raise TraceError(path, f"{where} is {value!r}, not a list of tensor shapes")
    return tuple(tuple(_int(path, where, d) for d in s) for s in value)


def _dtypes(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # torch's own tests write one string
        return (value,)
    return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else ()


def _entry(path: str, index: int, raw: Any) -> Entry:
    where = f"entry {index}"
    if not isinstance(raw, dict):
        raise TraceError(path, f"{where} is not a dict")
    missing = [k for k in ("profiling_name", "process_group", "state") if k not in raw]
    if "collective_seq_id" not in raw and "seq_id" not in raw:  # dumps before version 2.0: seq_id
        missing.append("collective_seq_id")
    if missing:
        raise TraceError(path, f"{where} has no {', '.join(repr(k) for k in missing)}")
    group = raw["process_group"]
    if not isinstance(group, (list, tuple)) or len(group) != 2:
        raise TraceError(path, f"{where}: process_group is {group!r}, not (name, description)")
    state = raw["state"]
    if state not in STATES:
        raise TraceError(path, f"{where}: state is {state!r}, not one of {', '.join(STATES)}")
    name = raw["profiling_name"]
    if not isinstance(name, str):
        raise TraceError(path, f"{where}: profiling_name is {name!r}, not text")
    return Entry(
        record_id=_int(path, f"{where} record_id", raw.get("record_id", index)),
        pg_id=_int(path, f"{where} pg_id", raw.get("pg_id", -1)),
        group=str(group[0]),
        group_desc=str(group[1]),
        collective_seq_id=_int(
            path,
            f"{where} collective_seq_id",
            raw.get("collective_seq_id", raw.get("seq_id")),
        ),
        p2p_seq_id=_int(path, f"{where} p2p_seq_id", raw.get("p2p_seq_id", 0)),
        profiling_name=name,
        is_p2p=bool(raw.get("is_p2p", False)),
        state=state,
        retired=bool(raw.get("retired", False)),
        time_created_ns=_int(path, f"{where} time_created_ns", raw.get("time_created_ns", 0)),
        input_sizes=_sizes(path, f"{where} input_sizes", raw.get("input_sizes", [])),
        output_sizes=_sizes(path, f"{where} output_sizes", raw.get("output_sizes", [])),
        input_dtypes=_dtypes(raw.get("input_dtypes", ())),
        output_dtypes=_dtypes(raw.get("output_dtypes", ())),
    )


def _groups(path: str, raw: Any) -> dict[str, GroupConfig]:
    if not isinstance(raw, dict):
        raise TraceError(path, "pg_config is not a dict")
    groups = {}
    for key, info in raw.items():
        if not isinstance(info, dict):
            raise TraceError(path, f"pg_config[{key!r}] is not a dict")
        ranks = info.get("ranks", "")
        listed = ranks if isinstance(ranks, (list, tuple)) else re.findall(r"-?\d+", str(ranks))
        name = str(info.get("name", key))
        groups[name] = GroupConfig(
            name,
            str(info.get("desc", "")),
            tuple(_int(path, f"pg_config[{key!r}] ranks", r) for r in listed),
        )
    return groups


def _status(path: str, raw: Any) -> dict[int, GroupStatus]:
    if not isinstance(raw, dict):
        raise TraceError(path, "pg_status is not a dict")
    status = {}
    for key, counters in raw.items():
        if not isinstance(counters, dict):
            raise TraceError(path, f"pg_status[{key!r}] is not a dict")
        seq = {k: _int(path, f"pg_status[{key!r}] {k}", counters.get(k, -1)) for k in
               ("last_enqueued_collective", "last_started_collective", "last_completed_collective")}  # fmt: skip
        status[_int(path, "a pg_status key", key)] = GroupStatus(
            seq["last_enqueued_collective"],
            seq["last_started_collective"],
            seq["last_completed_collective"],
        )
    return status


def parse_dump(path: str, rank: int, data: bytes) -> RankDump:
    """One rank's dump from its bytes."""
    raw = decode(path, data)
    entries = raw["entries"]
    if not isinstance(entries, list):
        raise TraceError(path, "'entries' is not a list")
    return RankDump(
        rank=rank,
        path=path,
        version=str(raw["version"]),
        groups=_groups(path, raw.get("pg_config", {})),
        status=_status(path, raw.get("pg_status", {})),
        entries=tuple(_entry(path, i, e) for i, e in enumerate(entries)),
    )


def dump_files(directory: Path) -> dict[int, Path]:
    """The dumps under ``directory``, by rank (the digits its file name ends in)."""
    found: dict[int, Path] = {}
    for path in sorted(directory.iterdir()):
        match = RANK_NAME.search(path.name)
        if match is None or path.name.startswith(".") or not path.is_file():
            continue
        rank = int(match.group(1))
        if rank in found:
            raise TraceError(
                directory,
                f"two dumps for rank {rank}: {found[rank].name} and {path.name}",
            )
        found[rank] = path
    if not found:
        raise TraceError(
            directory,
            "no flight recorder dump in it (one file per rank, its name ending in the rank: nccl_trace_rank_0)",
        )
    return found


def read_dumps(directory: str | Path) -> list[RankDump]:
    """Every rank's dump in ``directory``, by rank."""
    dumps = []
    for rank, path in sorted(dump_files(Path(directory)).items()):
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise TraceError(path, f"cannot be read ({exc.strerror or exc})") from None
        dumps.append(parse_dump(str(path), rank, data))
    return dumps
