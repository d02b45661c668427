"""Point-to-point transfers in flight recorder dumps: a send whose receive was
never posted, a receive whose send was never made.

NCCL records each side of a transfer: ``nccl:send 0->1`` on the sender and
``nccl:recv 1<-0`` on the receiver (ranks within the process group).  Their
``p2p_seq_id`` counts every point-to-point call of a rank in the group, so
two ranks' numbers do not line up; a transfer is matched by its ends and its
order instead: the k-th send from ``a`` to ``b`` is the k-th receive on ``b``
from ``a`` (NCCL keeps the order between two ranks).  The first transfer of a
pair that one side entered and did not finish is where the pair hangs: the
other side either never entered it (named) or waits in it too.  Gloo (torch
2.13) records no point-to-point call in its flight recorder.

A rank's ring buffer may have dropped its oldest calls (its first record id
is then above 0): its transfers cannot be numbered from the first, so its
pairs are left out, and said so.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from kinetolens.ingest.flight_recorder import Entry, RankDump

#: ``send 0->1`` (this rank 0 sends to 1) and ``recv 1<-0`` (this rank 1 receives from 0).
P2P_NAME = re.compile(r"^(send|recv) (\d+)(?:->|<-)(\d+)$")


@dataclass(frozen=True)
class Side:
    """One rank's side of one transfer."""

    rank: int
    entry: Entry

    @property
    def completed(self) -> bool:
        return self.entry.state == "completed"


@dataclass(frozen=True)
class StuckTransfer:
    """The first transfer between two ranks that a side entered and did not finish."""

    group: str
    group_label: str
    src: int
    dst: int
    #: The k-th transfer from ``src`` to ``dst`` (from 1).
    index: int
    sizes: tuple[tuple[int, ...], ...]
    #: Ranks that entered their side and wait in it.
    waiting: tuple[int, ...]
    #: The rank whose side was never entered, and which side that is (None: both entered).
    missing: int | None
    missing_side: str | None
    #: The missing rank left no dump: whether it entered is unknown.
    no_dump: bool


@dataclass(frozen=True)
class TransferMismatch:
    """Two sides of one transfer with different shapes."""

    group: str
    group_label: str
    src: int
    dst: int
    index: int
    send_sizes: tuple[tuple[int, ...], ...]
    recv_sizes: tuple[tuple[int, ...], ...]


def _global(dump: RankDump, group: str, local: int) -> int:
    """A group rank as a global rank (the group's member list; the rank itself where none is recorded)."""
    config = dump.groups.get(group)
    return config.ranks[local] if config is not None and local < len(config.ranks) else local


def _sides(dumps: list[RankDump]) -> dict[tuple[str, int, int], dict[str, list[Side]]]:
    """Per (group, src, dst): the sender's sends and the receiver's receives, in recording order."""
    out: dict[tuple[str, int, int], dict[str, list[Side]]] = defaultdict(lambda: {"send": [], "recv": []})
    for dump in dumps:
        for e in sorted(dump.entries, key=lambda e: e.record_id):
            m = P2P_NAME.match(e.op) if e.is_p2p else None
            if m is None:
                continue
            kind, peer = m.group(1), _global(dump, e.group, int(m.group(3)))
            src, dst = (dump.rank, peer) if kind == "send" else (peer, dump.rank)
            out[(e.group, src, dst)][kind].append(Side(dump.rank, e))
    return out


@dataclass(frozen=True)
class P2PReport:
    stuck: tuple[StuckTransfer, ...]
    mismatches: tuple[TransferMismatch, ...]
    notes: tuple[str, ...]


def p2p_report(dumps: list[RankDump], labels: dict[str, str]) -> P2PReport:
    """The stuck transfer of each pair of ranks, and transfers whose two sides disagree in shape."""
    dumped = {d.rank for d in dumps}
    wrapped = {d.rank for d in dumps if d.entries and min(e.record_id for e in d.entries) > 0}
    stuck: list[StuckTransfer] = []
    mismatches: list[TransferMismatch] = []
    left_out: set[tuple[int, int]] = set()
    for (group, src, dst), sides in sorted(_sides(dumps).items()):
        if {src, dst} & wrapped:
            left_out.add((src, dst))
            continue
        sends, recvs = sides["send"], sides["recv"]
        label = labels.get(group, f"group {group}")
        for k in range(max(len(sends), len(recvs))):
            send = sends[k] if k < len(sends) else None
            recv = recvs[k] if k < len(recvs) else None
            if send is not None and recv is not None and send.entry.input_sizes != recv.entry.output_sizes:
                mismatches.append(TransferMismatch(group, label, src, dst, k + 1, send.entry.input_sizes,
                                                   recv.entry.output_sizes))  # fmt: skip
            entered = [s for s in (send, recv) if s is not None]
            if all(s.completed for s in entered):
                continue
            absent = dst if recv is None else src if send is None else None
            stuck.append(StuckTransfer(
                group=group, group_label=label, src=src, dst=dst, index=k + 1,
                sizes=entered[0].entry.input_sizes if send is not None else entered[0].entry.output_sizes,
                waiting=tuple(s.rank for s in entered if not s.completed),
                missing=absent, missing_side=None if absent is None else ("recv" if recv is None else "send"),
                no_dump=absent is not None and absent not in dumped,
            ))  # fmt: skip
            break  # later transfers of the pair wait behind this one
    notes = [f"point-to-point {a} -> {b} not matched: a rank's recorder dropped its oldest calls" for a, b in sorted(left_out)]
    return P2PReport(tuple(stuck), tuple(mismatches), tuple(notes))
