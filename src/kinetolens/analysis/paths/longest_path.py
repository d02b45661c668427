"""The heaviest path of a weighted DAG given as edge arrays.

Most nodes of a trace's dependency graph sit on a plain chain: one edge in,
one edge out (the boundaries of ops nested on a thread).  Those chains are
contracted first, with numpy pointer jumping (``log2`` of the longest chain
passes over the edge arrays, no loop per node); rustworkx then takes the
longest path of the much smaller graph that is left (about 2x fewer edges on
real traces), and the chains on it are expanded back.

Equal-length choices: rustworkx resolves them by its own iteration order,
which can differ from one process to the next.  Where that matters (the
cross-rank path, whose ranks all leave a collective with equal weight) pass
``ties="lowest"``: then every node keeps, among its heaviest predecessors,
the one with the lowest node id (parallel equal chains: the first given),
and the path ends at the lowest-id node of the heaviest ones, the same in
every run.  The default keeps rustworkx's
choice (the single-rank path, pinned against HTA).
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


def _lowest_longest(g: rx.PyDiGraph, a: np.ndarray, b: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """The heaviest path of the contracted graph, equal lengths resolved to the lowest node id.

    Relaxed one topological generation at a time (numpy over that generation's
    incoming edges, no loop per node)."""
    try:
        gens = rx.topological_generations(g)
    except rx.DAGHasCycle:
        raise CycleError("the dependency graph has a cycle") from None
    level = np.zeros(n, dtype=np.int64)
    for k, gen in enumerate(gens):
        level[np.asarray(gen, dtype=np.int64)] = k
    # Edges grouped by their head's generation, each generation's edges one slice.
    order = np.argsort(level[b], kind="stable")
    bounds = np.searchsorted(level[b][order], np.arange(len(gens) + 1))
    dist = np.zeros(n, dtype=np.int64)
    pred = np.full(n, -1, dtype=np.int64)
    for k in range(1, len(gens)):
        e = order[bounds[k] : bounds[k + 1]]
        val = dist[a[e]] + w[e]
        # Per node: the largest value first, then the lowest predecessor id.
        pick = e[np.lexsort((a[e], -val, b[e]))]
        first = np.ones(pick.size, dtype=bool)
        first[1:] = b[pick][1:] != b[pick][:-1]
        best = pick[first]
        dist[b[best]] = dist[a[best]] + w[best]
        pred[b[best]] = a[best]
    end = int(np.argmax(dist))  # the first (lowest id) of the heaviest
    path = [end]
    while pred[path[-1]] >= 0:
        path.append(int(pred[path[-1]]))
    return np.asarray(path[::-1], dtype=np.int64)


def longest_path(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, nodes: int, ties: str = "rustworkx") -> list[int]:
    """Node ids along a heaviest path (weights are non-negative integers).

    ``ties="lowest"``: equal lengths resolve to the lowest node ids (the same
    path in every run); the default keeps rustworkx's choice."""
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
    if ties == "lowest":
        path = _lowest_longest(g, a, b, c_w, kept.size)
    else:
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
