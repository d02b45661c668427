"""The heaviest path of a weighted DAG given as edge arrays.

Most nodes of a trace's dependency graph sit on a plain chain: one edge in,
one edge out (the boundaries of ops nested on a thread).  Those chains are
contracted first, with numpy pointer jumping (``log2`` of the longest chain
passes over the edge arrays, no loop per node); rustworkx then takes the
longest path of the much smaller graph that is left (about 2x fewer edges on
real traces), and the chains on it are expanded back.
"""

from __future__ import annotations

import numpy as np
import rustworkx as rx


class CycleError(ValueError):
    """The graph has a cycle: event times contradict the dependencies."""


def _passes(n: int) -> int:
    """Pointer doubling reaches every root within log2(n) + 1 passes, unless pointers cycle."""
    return int(n).bit_length() + 2


def _root(parent: np.ndarray) -> np.ndarray:
    """Each element's root under ``parent`` (roots point to themselves), by pointer doubling."""
    for _ in range(_passes(parent.size)):
        up = parent[parent]
        if np.array_equal(up, parent):
            return parent
        parent = up
    raise CycleError("the dependency graph has a cycle")


def _depth(parent: np.ndarray) -> np.ndarray:
    """Each element's distance from its root under ``parent``, by pointer doubling."""
    depth = (parent != np.arange(parent.size)).astype(np.int64)
    for _ in range(_passes(parent.size)):
        up = parent[parent]
        if np.array_equal(up, parent):
            return depth
        depth = depth + depth[parent]
        parent = up
    raise CycleError("the dependency graph has a cycle")


def longest_path(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, nodes: int) -> list[int]:
    """Node ids along a heaviest path (weights are non-negative integers)."""
    edges = src.size
    if edges == 0:
        return []
    ids = np.arange(edges)
    through = (np.bincount(dst, minlength=nodes) == 1) & (np.bincount(src, minlength=nodes) == 1)
    in_edge = np.full(nodes, -1, dtype=np.int64)
    in_edge[dst] = ids
    out_edge = np.full(nodes, -1, dtype=np.int64)
    out_edge[src] = ids
    # prev[e] / next[e]: the edge before / after e on its chain (e itself at the chain's ends).
    prev = np.where(through[src], in_edge[src], ids)
    head = _root(prev)
    rank = _depth(prev)
    last = _root(np.where(through[dst], out_edge[dst], ids))
    heads = np.flatnonzero(head == ids)
    total = np.bincount(head, weights=weight.astype(np.float64), minlength=edges)
    c_src, c_dst = src[heads], dst[last[heads]]
    c_w = np.rint(total[heads]).astype(np.int64)
    used = np.zeros(nodes, dtype=bool)
    used[c_src] = True
    used[c_dst] = True
    kept = np.flatnonzero(used)
    index = np.cumsum(used) - 1
    a, b = index[c_src], index[c_dst]

    g = rx.PyDiGraph(check_cycle=False, multigraph=True, node_count_hint=kept.size, edge_count_hint=heads.size)
    g.add_nodes_from(range(kept.size))
    g.add_edges_from(list(zip(a.tolist(), b.tolist(), c_w.tolist())))
    try:
        path = np.asarray(rx.dag_longest_path(g, weight_fn=lambda _u, _v, w: w), dtype=np.int64)
    except rx.DAGHasCycle:
        raise CycleError("the dependency graph has a cycle") from None
    if path.size < 2:
        return kept[path].tolist()
    # Between two kept nodes, the heaviest contracted edge is the one the path took.
    key = a * kept.size + b
    step_key = path[:-1] * kept.size + path[1:]
    by_key = np.lexsort((-c_w, key))
    first = by_key[np.searchsorted(key[by_key], step_key)]
    chosen = heads[first]
    # Expand each chosen chain in order: its edges, by rank.
    pos = np.full(edges, -1, dtype=np.int64)
    pos[chosen] = np.arange(chosen.size)
    on = np.flatnonzero(pos[head] >= 0)
    on = on[np.lexsort((rank[on], pos[head[on]]))]
    return [int(src[on[0]]), *dst[on].tolist()]
