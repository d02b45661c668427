"""Which op carries the work of each op call (``analysis.work._carriers``).

The carrier search is vectorized (family bits OR-ed up one nesting level at
a time, then the outermost self-carrying ancestor by pointer jumping).  Here
it is checked against the rule written as a plain walk over the tree, on
random forests whose names mix composite ops (which defer to what runs
below them), plain registered ops and ops without a formula.
"""

from __future__ import annotations

import random

import polars as pl
import pytest

from kinetolens.analysis.workload.work import _carriers
from kinetolens.registry.flops import REGISTRY

NAMES = [
    "aten::linear",  # composite, defers to any family
    "aten::matmul",  # composite, defers to any family
    "aten::conv2d",  # composite, defers to conv
    "aten::convolution",  # composite, defers to conv
    "aten::scaled_dot_product_attention",  # composite, defers to attention or gemm
    "aten::to",  # composite (memory), any family
    "aten::mm",
    "aten::addmm",
    "aten::cudnn_convolution",
    "aten::add",
    "aten::copy_",
    "aten::relu",
    "MmBackward0",  # no formula
    "ProfilerStep#3",  # no formula
]


def walk_carriers(names: list[str], parents: list[int | None], has_work: set[int]) -> list[int | None]:
    """The rule, one op at a time: families strictly below each op, then the
    outermost ancestor-or-self that has work and is not a composite with a
    family it defers to below it."""
    n = len(names)
    below: list[set[str]] = [set() for _ in range(n)]
    for i in range(n - 1, -1, -1):
        p = parents[i]
        if p is not None:
            below[p] |= below[i]
            if i in has_work:
                below[p].add(REGISTRY[names[i]].family)
    carrier: list[int | None] = [None] * n
    for i in range(n):
        p = parents[i]
        if p is not None and carrier[p] is not None:
            carrier[i] = carrier[p]
            continue
        if i not in has_work:
            continue
        entry = REGISTRY[names[i]]
        wanted = entry.defers_to
        if entry.composite and below[i] and (wanted is None or below[i] & wanted):
            continue
        carrier[i] = i
    return carrier


def random_forest(seed: int, n: int) -> tuple[list[str], list[int | None], list[int]]:
    rng = random.Random(seed)
    parents: list[int | None] = []
    depth: list[int] = []
    for i in range(n):
        p = None if i == 0 or rng.random() < 0.05 else rng.randrange(max(0, i - 40), i)
        parents.append(p)
        depth.append(0 if p is None else depth[p] + 1)
    names = [rng.choice(NAMES) for _ in range(n)]
    return names, parents, depth


@pytest.mark.parametrize("seed", range(4))
def test_carriers_match_the_walk(seed: int) -> None:
    names, parents, depth = random_forest(seed, 4000)
    rng = random.Random(seed + 100)
    # Some registered calls have no usable formula (shapes missing): no work.
    has_work = {i for i, name in enumerate(names) if name in REGISTRY and rng.random() < 0.8}
    ops = pl.DataFrame(
        {"op_id": range(len(names)), "parent_id": parents, "depth": depth, "name": names},
        schema={"op_id": pl.Int64, "parent_id": pl.Int64, "depth": pl.Int64, "name": pl.String},
    )
    works = pl.DataFrame({"op_id": sorted(has_work)}, schema={"op_id": pl.Int64})
    expected = walk_carriers(names, parents, has_work)
    got = _carriers(ops, works).to_list()
    assert got == expected
    # The forest exercises both outcomes of a composite: carrying its own
    # work, and deferring to what runs below it.
    composites = [i for i in has_work if REGISTRY[names[i]].composite and (parents[i] is None or expected[parents[i]] is None)]
    assert any(expected[i] == i for i in composites)
    assert any(expected[i] is None for i in composites)
