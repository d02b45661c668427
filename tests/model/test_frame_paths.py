"""Module paths and source lines of Python frames (``model.build._frame_paths``).

The columns are computed by pointer jumping; here they are checked against
the rule written as a walk down the frame tree, on random forests of
module frames, user-code frames and library frames.
"""

from __future__ import annotations

import random

import polars as pl
import pytest

from kinetolens.model.build import _frame_paths
from kinetolens.model.frames import MODULE_PREFIX, enclosing_function

FRAMES = [
    "nn.Module: Linear_0",
    "nn.Module: Encoder_1",
    "nn.Module: Attention_0",
    "train.py(42): step",
    "model.py(17): forward",
    "torch/nn/modules/module.py(1501): _call_impl",
    "<built-in method linear of type object at 0x7f>",
    "/usr/lib/python3.11/site-packages/transformers/x.py(3): f",
]


def walk(names: list[str | None], parents: list[int]) -> tuple[list[str | None], list[str | None]]:
    """The rule, frame by frame (parents come before their children)."""
    module_of: list[str | None] = [None] * len(names)
    source_of: list[str | None] = [None] * len(names)
    for i, raw in enumerate(names):
        p = parents[i]
        parent_module = module_of[p] if p >= 0 else None
        parent_source = source_of[p] if p >= 0 else None
        name = raw or ""
        if name.startswith(MODULE_PREFIX):
            short = name[len(MODULE_PREFIX) :]
            module_of[i] = f"{parent_module}.{short}" if parent_module else short
        else:
            module_of[i] = parent_module
        source_of[i] = enclosing_function(name) or parent_source
    return module_of, source_of


@pytest.mark.parametrize("seed", range(4))
def test_frame_paths_match_the_walk(seed: int) -> None:
    rng = random.Random(seed)
    n = 3000
    parents = [-1 if i == 0 or rng.random() < 0.03 else rng.randrange(max(0, i - 30), i) for i in range(n)]
    names = [None if rng.random() < 0.01 else rng.choice(FRAMES) for _ in range(n)]
    module, source = _frame_paths(pl.Series(names, dtype=pl.String), pl.Series(parents, dtype=pl.Int64))
    expected_module, expected_source = walk(names, parents)
    assert module.to_list() == expected_module
    assert source.to_list() == expected_source
    # Deep paths exist, so the jumping needed several rounds.
    assert max(m.count(".") for m in expected_module if m) >= 4
