"""Pointer doubling over a forest given as a parent array.

``parent[i]`` is the index of element ``i``'s parent, and a root is its own
parent.  Each pass replaces every pointer by its pointer's pointer, so any
forest is done in about log2(depth) vectorized passes, with no Python step per
element: the longest-path search walks its plain chains this way, the op
tables sum each op's subtree level by level.
"""

from __future__ import annotations

import numpy as np


class CycleError(ValueError):
    """The pointers form a cycle (in a dependency graph: event times contradict the dependencies)."""


def _passes(n: int) -> int:
    """Pointer doubling reaches every root within log2(n) + 1 passes, unless pointers cycle."""
    return int(n).bit_length() + 2


def roots(parent: np.ndarray) -> np.ndarray:
    """Each element's root under ``parent``."""
    for _ in range(_passes(parent.size)):
        up = parent[parent]
        if np.array_equal(up, parent):
            return parent
        parent = up
    raise CycleError("the parent pointers form a cycle")


def depths(parent: np.ndarray) -> np.ndarray:
    """Each element's distance from its root under ``parent`` (0 at the roots)."""
    depth = (parent != np.arange(parent.size)).astype(np.int64)
    for _ in range(_passes(parent.size)):
        up = parent[parent]
        if np.array_equal(up, parent):
            return depth
        depth = depth + depth[parent]
        parent = up
    raise CycleError("the parent pointers form a cycle")
