"""Why a distributed job hangs, from each rank's flight recorder dump.

Every collective of a process group carries a sequence id that counts up on
each member rank in the same order.  A hang shows as a sequence id that some
members entered and others never reached (those are the ranks to look at), or
one every member entered that none completed; and a desync shows as two ranks
calling different collectives, or the same one with different shapes, at the
same sequence id of one group.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from kinetolens.analysis.ranks.hang_p2p import StuckTransfer, TransferMismatch, p2p_report
from kinetolens.ingest.flight_recorder import Entry, RankDump

#: Collectives whose input shapes differ between ranks by design (torch's own matcher skips them too).
UNEVEN_INPUTS = frozenset(
    {
        "all_to_all",
        "all_to_all_single",
        "all_to_all_v_single",
        "scatter",
        "all_gather_v",
        "reduce_scatter_v",
    }
)
#: ... and those whose output shapes do.
UNEVEN_OUTPUTS = frozenset(
    {
        "all_to_all",
        "all_to_all_single",
        "all_to_all_v_single",
        "gather",
        "all_gather_v",
        "reduce_scatter_v",
    }
)
#: The description torch gives the default (world) process group.
DEFAULT_GROUP = "default_pg"
#: Mismatches listed one by one; the rest are counted.
MISMATCH_CAP = 5


@dataclass(frozen=True)
class Call:
    """One rank's call in one process group."""

    group: str
    seq_id: int
    op: str
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    state: str

    @classmethod
    def of(cls, entry: Entry) -> Call:
        seq = entry.p2p_seq_id if entry.is_p2p else entry.collective_seq_id
        return cls(
            entry.group,
            seq,
            entry.op,
            entry.input_sizes,
            entry.output_sizes,
            entry.state,
        )


@dataclass(frozen=True)
class RankProgress:
    """Where one rank was when it dumped."""

    rank: int
    #: Its newest recorded call (any group, point-to-point included).
    last_entered: Call | None
    #: Its newest call that the recorder saw complete (``None``: none did).
    last_completed: Call | None


@dataclass(frozen=True)
class Stuck:
    """The first collective of a group that not every member finished."""

    group: str
    group_label: str
    seq_id: int
    op: str
    input_sizes: tuple[tuple[int, ...], ...]
    #: Members that entered it (and wait in it).
    waiting: tuple[int, ...]
    #: Members whose dump shows they never entered it.
    missing: tuple[int, ...]
    #: Members with no dump in the directory: unknown.
    no_dump: tuple[int, ...]
    #: Per missing rank, the last sequence id of this group it entered (0: none).
    missing_last: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Mismatch:
    """Ranks that called different collectives (``op``) or shapes (``sizes``) at one sequence id."""

    group: str
    group_label: str
    seq_id: int
    kind: str
    #: (rank, what it called) for each distinct call, the lowest rank's first.
    calls: tuple[tuple[tuple[int, ...], str], ...]


@dataclass(frozen=True)
class HangReport:
    """Every rank's progress, the stuck collective of each group, and desyncs."""

    ranks: tuple[RankProgress, ...]
    stuck: tuple[Stuck, ...]
    mismatches: tuple[Mismatch, ...]
    mismatch_count: int
    #: Point-to-point: each pair's stuck transfer, and transfers whose sides differ in shape.
    stuck_transfers: tuple[StuckTransfer, ...]
    transfer_mismatches: tuple[TransferMismatch, ...]
    versions: tuple[str, ...]
    backends: tuple[str, ...]
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The document ``kinetolens hang --json`` prints."""
        return {
            "versions": list(self.versions),
            "backends": list(self.backends),
            "ranks": [asdict(r) for r in self.ranks],
            "stuck": [asdict(s) for s in self.stuck],
            "mismatches": [asdict(m) for m in self.mismatches],
            "mismatch_count": self.mismatch_count,
            "stuck_transfers": [asdict(s) for s in self.stuck_transfers],
            "transfer_mismatches": [asdict(m) for m in self.transfer_mismatches],
            "notes": list(self.notes),
        }


def shapes(sizes: tuple[tuple[int, ...], ...]) -> str:
    """``[[4, 4], [8]]`` as torch prints them."""
    return "[" + ", ".join("[" + ", ".join(map(str, s)) + "]" for s in sizes) + "]"


def _completed(dump: RankDump, entry: Entry) -> bool:
    if entry.state == "completed":
        return True
    status = dump.status.get(entry.pg_id)
    return not entry.is_p2p and status is not None and entry.collective_seq_id <= status.last_completed


def progress(dump: RankDump) -> RankProgress:
    entries = sorted(dump.entries, key=lambda e: e.record_id)
    done = [e for e in entries if _completed(dump, e)]
    return RankProgress(
        dump.rank,
        Call.of(entries[-1]) if entries else None,
        Call.of(done[-1]) if done else None,
    )


def _label(name: str, desc: str) -> str:
    return desc if desc and desc != "undefined" else f"group {name}"


class _Group:
    """One process group across the dumps: its calls by rank and sequence id."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.desc = ""
        self.calls: dict[int, dict[int, list[Entry]]] = defaultdict(lambda: defaultdict(list))
        self.entered: dict[int, int] = {}
        self.completed: dict[int, int] = {}

    @property
    def label(self) -> str:
        return _label(self.name, self.desc)


def _collect(dumps: list[RankDump]) -> dict[str, _Group]:
    groups: dict[str, _Group] = {}
    for dump in dumps:
        pg_names: dict[int, str] = {}
        for e in sorted(dump.entries, key=lambda e: e.record_id):
            if e.is_p2p:
                continue
            g = groups.setdefault(e.group, _Group(e.group))
            g.desc = g.desc or e.group_desc
            pg_names[e.pg_id] = e.group
            g.calls[dump.rank][e.collective_seq_id].append(e)
            g.entered[dump.rank] = max(g.entered.get(dump.rank, 0), e.collective_seq_id)
            if _completed(dump, e):
                g.completed[dump.rank] = max(g.completed.get(dump.rank, 0), e.collective_seq_id)
        for pg_id, status in dump.status.items():
            if pg_id in pg_names:
                g = groups[pg_names[pg_id]]
                g.entered[dump.rank] = max(g.entered.get(dump.rank, 0), status.last_enqueued)
                g.completed[dump.rank] = max(g.completed.get(dump.rank, 0), status.last_completed)
    return groups


def _members(group: _Group, dumps: list[RankDump]) -> tuple[set[int], bool]:
    """The group's ranks, and whether they are known (from its config) or only those that used it.

    Gloo's recorder (torch 2.13) keeps one pg_config entry with an empty name
    for every group; then the default group is every rank of the run and a
    subgroup is the ranks that recorded a call in it."""
    listed = {r for d in dumps if (c := d.groups.get(group.name)) is not None for r in c.ranks}
    if listed:
        return listed, True
    if group.desc == DEFAULT_GROUP:
        world = {d.rank for d in dumps} | {r for d in dumps for c in d.groups.values() for r in c.ranks}
        return world, True
    return set(group.calls), False


def _stuck(group: _Group, members: set[int], dumped: set[int]) -> Stuck | None:
    seen = sorted(members & dumped)
    if not seen:
        return None
    entered = {r: group.entered.get(r, 0) for r in seen}
    low, high = min(entered.values()), max(entered.values())
    if low < high:
        seq = low + 1
        waiting = [r for r in seen if entered[r] >= seq]
        missing = [r for r in seen if entered[r] < seq]
    else:
        done = {r: group.completed.get(r, 0) for r in seen}
        seq = min(done.values()) + 1
        if seq > high:
            return None
        waiting = [r for r in seen if done[r] < seq]
        missing = []
    calls = [e for r in waiting for e in group.calls[r].get(seq, [])]
    first = calls[-1] if calls else None  # a coalesced call ends in its "coalesced" entry
    return Stuck(
        group=group.name,
        group_label=group.label,
        seq_id=seq,
        op=first.op if first else "?",
        input_sizes=first.input_sizes if first else (),
        waiting=tuple(waiting),
        missing=tuple(missing),
        no_dump=tuple(sorted(members - dumped)),
        missing_last=tuple((r, entered[r]) for r in missing),
    )


def _signature(entries: list[Entry]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    ops = tuple(e.op for e in entries)
    sizes = tuple(
        (
            None if e.op in UNEVEN_INPUTS else e.input_sizes,
            None if e.op in UNEVEN_OUTPUTS else e.output_sizes,
        )
        for e in entries
    )
    return ops, sizes


def _describe(entries: list[Entry]) -> str:
    return "; ".join(f"{e.op} {shapes(e.input_sizes)} -> {shapes(e.output_sizes)}" for e in entries)


def _mismatches(group: _Group) -> list[Mismatch]:
    """Sequence ids where the group's ranks disagree.  A rank's oldest
    sequence id may have lost entries to the ring buffer: it is compared
    only when it is the group's first."""
    oldest = {r: min(calls) for r, calls in group.calls.items() if calls}
    seqs = sorted({s for calls in group.calls.values() for s in calls})
    found = []
    for seq in seqs:
        by_rank = {
            r: calls[seq] for r, calls in sorted(group.calls.items()) if seq in calls and (seq > oldest[r] or seq == 1)
        }
        if len(by_rank) < 2:
            continue
        signatures = {r: _signature(es) for r, es in by_rank.items()}
        distinct: dict[Any, list[int]] = {}
        for r, sig in signatures.items():
            distinct.setdefault(sig, []).append(r)
        if len(distinct) < 2:
            continue
        kind = "op" if len({sig[0] for sig in distinct}) > 1 else "sizes"
        calls = tuple((tuple(ranks), _describe(by_rank[ranks[0]])) for ranks in distinct.values())
        found.append(Mismatch(group.name, group.label, seq, kind, calls))
    return found


def hang_report(dumps: list[RankDump]) -> HangReport:
    """The hang and desync picture of the ranks whose dumps are given."""
    dumped = {d.rank for d in dumps}
    notes: list[str] = []
    stuck: list[Stuck] = []
    mismatches: list[Mismatch] = []
    groups = _collect(dumps)
    for name, group in sorted(groups.items(), key=lambda kv: (len(kv[0]), kv[0])):
        members, known = _members(group, dumps)
        if not known:
            notes.append(
                f"{group.label}: its member list is not in the dumps; a member that recorded none of its calls cannot be named"
            )
        found = _stuck(group, members, dumped)
        if found is not None:
            stuck.append(found)
            claimed = [r for r in found.waiting if group.completed.get(r, 0) >= found.seq_id]
            if found.missing and claimed:
                notes.append(
                    f"{group.label} #{found.seq_id}: rank {', '.join(map(str, claimed))} recorded it as finished though "
                    "a member never entered it: it failed or timed out (gloo retires a collective that timed out)"
                )
        mismatches.extend(_mismatches(group))
    labels = {name: g.label for name, g in groups.items()}
    labels |= {name: _label(name, c.desc) for d in dumps for name, c in d.groups.items() if name not in labels}
    p2p = p2p_report(dumps, labels)
    notes += p2p.notes
    versions = sorted({d.version for d in dumps})
    if len(versions) > 1:
        notes.append(f"the dumps come from different recorder versions: {', '.join(versions)}")
    backends = sorted({e.backend for d in dumps for e in d.entries if e.backend})
    return HangReport(
        ranks=tuple(progress(d) for d in sorted(dumps, key=lambda d: d.rank)),
        stuck=tuple(stuck),
        mismatches=tuple(mismatches[:MISMATCH_CAP]),
        mismatch_count=len(mismatches),
        stuck_transfers=p2p.stuck,
        transfer_mismatches=p2p.mismatches,
        versions=tuple(versions),
        backends=tuple(backends),
        notes=tuple(notes),
    )
