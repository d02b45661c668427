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

from functools import cached_property

import numpy as np
import rustworkx as rx

from kinetolens.analysis.forest import CycleError, depths, roots


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


class Contracted:
    """A graph's plain chains contracted and its rustworkx graph built, once per
    topology: the what-if re-times one step's graph with several change sets,
    which change weights, not edges, and building the graph cost as much as the
    search.  The edges' data are their contracted indices, so that weights can
    change from one search to the next."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, nodes: int) -> None:
        self.src, self.dst, self.nodes = src, dst, nodes
        edges = src.size
        ids = np.arange(edges)
        through = (np.bincount(dst, minlength=nodes) == 1) & (np.bincount(src, minlength=nodes) == 1)
        in_edge = np.full(nodes, -1, dtype=np.int64)
        in_edge[dst] = ids
        out_edge = np.full(nodes, -1, dtype=np.int64)
        out_edge[src] = ids
        # prev[e] / next[e]: the edge before / after e on its chain (e itself at the chain's ends).
        prev = np.where(through[src], in_edge[src], ids)
        self._prev = prev
        self.head = roots(prev)
        last = roots(np.where(through[dst], out_edge[dst], ids))
        self.heads = np.flatnonzero(self.head == ids)
        c_src, c_dst = src[self.heads], dst[last[self.heads]]
        used = np.zeros(nodes, dtype=bool)
        used[c_src] = True
        used[c_dst] = True
        self.kept = np.flatnonzero(used)
        index = np.cumsum(used) - 1
        self.a, self.b = index[c_src], index[c_dst]
        self.graph = rx.PyDiGraph(check_cycle=False, multigraph=True, node_count_hint=self.kept.size, edge_count_hint=self.heads.size)
        self.graph.add_nodes_from(range(self.kept.size))
        self.graph.add_edges_from(list(zip(self.a.tolist(), self.b.tolist(), range(self.heads.size))))

    @cached_property
    def rank(self) -> np.ndarray:
        """Each edge's place on its chain (0 for the chain's first): only a
        listed path needs it, to put its chains' edges in order."""
        return depths(self._prev)

    def path(self, weight: np.ndarray, ties: str = "rustworkx") -> list[int]:
        """Node ids along a heaviest path under ``weight`` (see :func:`longest_path`)."""
        chosen, on = self._chosen(weight, ties)
        if on is None:
            return chosen.tolist()
        # Expand each chosen chain in order: its edges, by rank.
        pos = np.full(self.src.size, -1, dtype=np.int64)
        pos[chosen] = np.arange(chosen.size)
        on = on[np.lexsort((self.rank[on], pos[self.head[on]]))]
        return [int(self.src[on[0]]), *self.dst[on].tolist()]

    def length(self, weight: np.ndarray) -> int | None:
        """The heaviest path's length under non-negative integer ``weight``
        (None: no path of two nodes or more).  Only the length: rustworkx's
        search without its path, nothing mapped back to the edges."""
        if self.heads.size == 0:
            return None
        w = self._chain_weights(weight).tolist()
        try:
            return int(rx.dag_longest_path_length(self.graph, weight_fn=lambda _u, _v, i: w[i]))
        except rx.DAGHasCycle:
            raise CycleError("the dependency graph has a cycle") from None

    def _chain_weights(self, weight: np.ndarray) -> np.ndarray:
        """Each contracted edge's weight: its chain's edges summed (exact below 2**53)."""
        total = np.bincount(self.head, weights=weight.astype(np.float64), minlength=self.src.size)
        return np.rint(total[self.heads]).astype(np.int64)

    def _chosen(self, weight: np.ndarray, ties: str) -> tuple[np.ndarray, np.ndarray | None]:
        """The heaviest path's contracted edges (their chains' first edges, in
        path order) and, unordered, every original edge on it; for a path of
        fewer than two nodes, its node ids and None."""
        edges, kept = self.src.size, self.kept
        head, heads, a, b = self.head, self.heads, self.a, self.b
        c_w = self._chain_weights(weight)
        if ties == "lowest":
            path = _lowest_longest(self.graph, a, b, c_w, kept.size)
        else:
            w = c_w.tolist()
            try:
                path = np.asarray(rx.dag_longest_path(self.graph, weight_fn=lambda _u, _v, i: w[i]), dtype=np.int64)
            except rx.DAGHasCycle:
                raise CycleError("the dependency graph has a cycle") from None
        if path.size < 2:
            return kept[path], None
        # Between two kept nodes, the heaviest contracted edge is the one the path took.
        key = a * kept.size + b
        step_key = path[:-1] * kept.size + path[1:]
        by_key = np.lexsort((-c_w, key))
        chosen = heads[by_key[np.searchsorted(key[by_key], step_key)]]
        on_path = np.zeros(edges, dtype=bool)
        on_path[chosen] = True
        return chosen, np.flatnonzero(on_path[head])


def longest_path(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, nodes: int, ties: str = "rustworkx") -> list[int]:
    """Node ids along a heaviest path (weights are non-negative integers).

    ``ties="lowest"``: equal lengths resolve to the lowest node ids (the same
    path in every run); the default keeps rustworkx's choice.  Several
    searches on one topology: :class:`Contracted` (built once)."""
    if src.size == 0:
        return []
    return Contracted(src, dst, nodes).path(weight, ties)
