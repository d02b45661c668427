"""Interval nesting: the polars solution against the rule, on random threads.

The real traces nest properly (tests/model/test_model.py and the attribution tests
cover them); these cases add what they lack: ranges that overlap their
parent without nesting, zero-length ranges, equal starts and ends, and
queries that never become parents.
"""

from __future__ import annotations

import random

import polars as pl
import pytest

from kinetolens.model.nesting import enclosing, nearest_marked, outermost_marked


def reference(rows: list[tuple[int, int, int, int, bool]]) -> tuple[dict[int, int], dict[int, int], int]:
    """The rule, written plainly: per thread, in (start, longest first) order,
    close the open ranges that ended by this start, take the innermost open
    one as parent; a container that outlives its parent counts as overlap."""
    order = sorted(rows, key=lambda r: (r[1], r[2], -r[3]))  # group, ts, end desc (stable)
    parent: dict[int, int] = {}
    depth: dict[int, int] = {}
    overlaps = 0
    stack: list[tuple[int, int]] = []
    group = None
    for row, g, ts, end, container in order:
        if g != group:
            stack, group = [], g
        while stack and stack[-1][1] <= ts:
            stack.pop()
        parent[row] = stack[-1][0] if stack else -1
        depth[row] = len(stack)
        if stack and container and end > stack[-1][1]:
            overlaps += 1
        if container:
            stack.append((row, end))
    return parent, depth, overlaps


def random_rows(rng: random.Random, n: int, tangled: bool) -> list[tuple[int, int, int, int, bool]]:
    rows = []
    for row in range(n):
        group = rng.randrange(3)
        ts = rng.randrange(0, 200)
        dur = rng.choice([0, 0, 1, 5, 20, 80]) if tangled else 0
        rows.append((row, group, ts, ts + dur, rng.random() < 0.8))
    if not tangled:
        # Properly nested ranges: children cut from their parent's span.
        rows = []
        row = 0

        def spawn(group: int, lo: int, hi: int, level: int) -> None:
            nonlocal row
            t = lo
            while t < hi and level < 5:
                start = rng.randrange(t, hi)
                end = rng.randrange(start, hi + 1)
                rows.append((row, group, start, end, rng.random() < 0.85))
                row += 1
                spawn(group, start, end, level + 1)
                t = end + rng.randrange(0, 3)

        for group in range(3):
            spawn(group, 0, 1000, 0)
    return rows


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("tangled", [False, True])
def test_enclosing_follows_the_rule(seed: int, tangled: bool) -> None:
    rng = random.Random(seed)
    rows = random_rows(rng, 400, tangled)
    rng.shuffle(rows)
    frame = pl.DataFrame(
        {
            "row": [r[0] for r in rows],
            "group": [r[1] for r in rows],
            "ts": [r[2] for r in rows],
            "end": [r[3] for r in rows],
            "container": [r[4] for r in rows],
        },
        schema={"row": pl.Int64, "group": pl.Int64, "ts": pl.Int64, "end": pl.Int64, "container": pl.Boolean},
    )
    # The reference breaks ties in the frame's order, as the sort does.
    parent, depth, overlaps = reference([r for r in rows])
    got = enclosing(frame, is_container="container")
    assert got.parent.to_list() == [parent[i] for i in range(len(rows))]
    assert got.depth.to_list() == [depth[i] for i in range(len(rows))]
    assert got.overlaps == overlaps
    if tangled:
        assert overlaps > 0  # the case exists, so the replay path ran


def random_forest(n: int) -> tuple[list[int | None], list[bool]]:
    """Parents precede children (as ops do), with deep chains; 10% marked."""
    rng = random.Random(7)
    parent: list[int | None] = [None if i == 0 or rng.random() < 0.02 else rng.randrange(max(0, i - 5), i) for i in range(n)]
    return parent, [rng.random() < 0.1 for _ in range(n)]


def walk_up(parent: list[int | None], marked: list[bool], *, keep_first: bool) -> list[int | None]:
    """The definition: walk up from each row, keeping the first or the last marked row seen."""
    found: list[int | None] = []
    for i in range(len(parent)):
        best, j = None, i
        while j is not None and not (keep_first and best is not None):
            best = j if marked[j] else best
            j = parent[j]
        found.append(best)
    return found


def test_outermost_marked_matches_walking_up_each_row() -> None:
    parent, marked = random_forest(5000)
    expected = walk_up(parent, marked, keep_first=False)
    got = outermost_marked(pl.Series(parent, dtype=pl.Int64), pl.Series(marked))
    assert got.to_list() == expected
    assert 100 < sum(e is not None for e in expected) < len(parent)  # marks both found and missing


def test_nearest_marked_matches_walking_up_each_row() -> None:
    parent, marked = random_forest(5000)
    expected = walk_up(parent, marked, keep_first=True)
    got = nearest_marked(pl.Series(parent, dtype=pl.Int64), pl.Series(marked))
    assert got.to_list() == expected
    # Nearest and outermost differ wherever a marked row has a marked ancestor.
    assert expected != walk_up(parent, marked, keep_first=False)
