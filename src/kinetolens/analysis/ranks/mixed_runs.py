"""Ranks that cannot be one job: a folder holding traces of several runs.

Each rank records what job it belongs to: its world size and backend
(``distributedInfo``) and the GPU it ran on.  Where the ranks of a run
disagree (world sizes 2 and 8; an A100 among V100s), comparing them would
put the step of one job beside another's: every cross-rank figure is then
suspect, so ``dist`` names the ranks of each kind in one sentence instead
of mixing them silently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kinetolens.analysis.ranks.distributed import RankSummary


def _ranks(ranks: list[int]) -> str:
    """``rank 3`` / ``ranks 0-6`` / ``ranks 0, 2, 5``."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


#: What each rank records about its job, and how a value reads in a sentence.
FACTS: tuple[tuple[str, Callable[[RankSummary], Any], Callable[[Any], str]], ...] = (
    ("world size", lambda s: s.world_size, lambda v: f"world size {v}"),
    ("backend", lambda s: s.backend, str),
    ("GPU", lambda s: s.device, str),
)


def mixed_run_notes(summaries: Sequence[RankSummary]) -> list[str]:
    """One sentence per fact the ranks disagree on (only ranks that record it count),
    and one when more ranks are present than the world size they record."""
    notes = []
    for what, get, words in FACTS:
        groups: dict[Any, list[int]] = {}
        for s in summaries:
            value = get(s)
            if value is not None:
                groups.setdefault(value, []).append(s.rank)
        if len(groups) > 1:
            parts = "; ".join(f"{_ranks(r)}: {words(v)}" for v, r in sorted(groups.items(), key=lambda g: min(g[1])))
            notes.append(
                f"the ranks record different {what}s ({parts}): traces of different jobs are in this folder, "
                "so the cross-rank figures compare them as if they were one"
            )
    sizes = {s.world_size for s in summaries if s.world_size is not None}
    if len(sizes) == 1 and len(summaries) > (size := sizes.pop()):
        notes.append(f"{len(summaries)} ranks in a job of world size {size}: traces of another job are in this folder")
    return notes
