"""Interval nesting on one thread: who encloses whom.

Kineto ranges on a thread form a forest (an op contains the ops it calls).
Real traces also contain ranges that overlap without nesting (async
annotations, clock jitter of a few ns); those are kept, attached to the range
they start in, and counted, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass
class Nesting:
    """For every input row: its innermost enclosing container (or -1)."""

    parent: list[int]
    depth: list[int]
    overlaps: int


def enclosing(frame: pl.DataFrame, *, is_container: str | None = None) -> Nesting:
    """Innermost enclosing container of every row of ``frame``.

    ``frame`` needs columns ``row`` (the caller's index), ``group`` (a thread
    key), ``ts`` and ``end``.  When ``is_container`` names a boolean column,
    only those rows can enclose others (queries such as runtime calls are
    looked up but never become parents).  Returned lists are indexed by
    ``row``.  A row encloses another when it starts at or before it and the
    other starts before it ends; ties in start put the longer range outside.
    """
    n = frame.height
    parent = [-1] * n
    depth = [0] * n
    if n == 0:
        return Nesting(parent, depth, 0)
    cols = ["row", "group", "ts", "end"] + ([is_container] if is_container else [])
    ordered = frame.select(cols).sort(["group", "ts", "end"], descending=[False, False, True], maintain_order=True)
    rows = ordered["row"].to_list()
    groups = ordered["group"].to_list()
    starts = ordered["ts"].to_list()
    ends = ordered["end"].to_list()
    container = ordered[is_container].to_list() if is_container else [True] * n
    overlaps = 0
    stack_rows: list[int] = []
    stack_ends: list[int] = []
    current = object()
    for i in range(n):
        g = groups[i]
        if g != current:
            stack_rows.clear()
            stack_ends.clear()
            current = g
        ts = starts[i]
        while stack_ends and stack_ends[-1] <= ts:
            stack_ends.pop()
            stack_rows.pop()
        row = rows[i]
        if stack_rows:
            parent[row] = stack_rows[-1]
            depth[row] = len(stack_rows)
            if container[i] and ends[i] > stack_ends[-1]:
                overlaps += 1
        if container[i]:
            stack_rows.append(row)
            stack_ends.append(ends[i])
    return Nesting(parent, depth, overlaps)
