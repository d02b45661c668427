"""The critical path across ranks: every rank's step graph, joined at its collectives.

A collective cannot finish on any rank of its process group before the last
rank has arrived.  So, per step:

1. Each rank's dependency graph (:func:`kinetolens.analysis.paths.dependency_graph.build_graph`)
   is built where the rank's trace is (a worker process or a Dask worker:
   :func:`rank_graphs`), with its collective calls as nodes: an NCCL call's
   kernel (arrival: its start, finish: its end), or a ``gloo:*`` range on
   gloo's thread, which is added here with an edge from the ``c10d::`` op that
   issued it and one to the issuing thread's next op after it ended.  Only
   compact arrays come back (:class:`RankGraphs`: edge arrays, the events
   the edges name, the calls' nodes).
2. In the calling process (:func:`joined_graph`) the graphs are put side by
   side and each call matched across ranks (by :func:`kinetolens.analysis.ranks.distributed.matched_calls`:
   process group, collective and sequence number) gets a join node: every
   rank's arrival -> join (0) -> every rank's finish, weighing the call's
   transfer time (its shortest duration among the ranks).  The rank's own
   arrival -> finish edge, which holds its waiting, is dropped: the wait is
   now the path through the rank that arrived last.
3. The longest path of the joined graph (:func:`cross_rank_path`) says which
   rank, and which of its work, gates the step.

Clocks: ranks' clocks (hosts, or GPUs) may disagree by milliseconds, so no
timestamp of one rank is ever compared with another's.  Every edge weight is
a duration on one rank's own clock, and the join adds only the call's
shortest duration; which rank arrived last is decided by the path lengths up
to the call, and how long it held the others by durations (a rank's wait at
a call is its duration minus the call's shortest).

:class:`JoinedGraph` is also the simulator's input: its arrays can be
re-weighted and :meth:`JoinedGraph.longest` run again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from kinetolens.analysis.paths.critical_path import BOUND_BY, summarize, top_items
from kinetolens.analysis.paths.critical_path import step_windows as trace_step_windows
from kinetolens.analysis.paths.dependency_graph import DependencyGraph, TraceFacts, build_graph
from kinetolens.analysis.paths.longest_path import CycleError
from kinetolens.analysis.paths.longest_path import longest_path as chain_longest_path
from kinetolens.analysis.ranks.collectives import collective_calls
from kinetolens.analysis.ranks.distributed import RankSummary, matched_calls
from kinetolens.analysis.session import whole_steps
from kinetolens.errors import TraceError
from kinetolens.model.trace import Trace
from kinetolens.model.vocabulary import BOUND_WORDS, C10D_PREFIX, PARAM_COMMS

#: Edge bounds, as codes: :data:`kinetolens.analysis.paths.critical_path.BOUND_BY`
#: and ``dependency`` (0 ns ordering edges, join edges into a call included).
BOUNDS: tuple[str, ...] = (*BOUND_BY, "dependency")
_CODE = {b: i for i, b in enumerate(BOUNDS)}
#: Host ranges that issue a collective on the caller's thread.
ISSUE_PREFIXES = (C10D_PREFIX, PARAM_COMMS)
#: How collective kinds read in a verdict.
KIND_WORDS = {
    "allreduce": "all-reduce", "allgather": "all-gather", "reduce_scatter": "reduce-scatter",
    "alltoall": "all-to-all", "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "send/recv",
    "barrier": "barrier", "gather": "gather", "scatter": "scatter",
}  # fmt: skip
_ITEM_SCHEMA = {"eid": pl.Int64, "name": pl.Categorical, "where": pl.String, "module": pl.Categorical, "source": pl.Categorical}
_CALL_NODES = {"op_id": pl.Int64, "arrive": pl.Int64, "finish": pl.Int64, "single": pl.Boolean}


@dataclass
class StepGraph:
    """One rank's graph of one step, as arrays (node ids local to the rank)."""

    step: int
    src: np.ndarray
    dst: np.ndarray
    #: ns, on the rank's own clock.
    weight: np.ndarray
    #: Codes into :data:`BOUNDS`.
    bound: np.ndarray
    #: The event an edge's time belongs to (a row of ``items``); -1: none.
    eid: np.ndarray
    nodes: int
    #: ``eid``, ``name``, ``where`` (thread or stream), ``module``, ``source``.
    items: pl.DataFrame
    #: The step's collective calls: ``op_id`` (as in :func:`collective_calls`),
    #: ``arrive`` / ``finish`` nodes, ``single`` (arrive -> finish is one edge).
    calls: pl.DataFrame
    #: The step's wall time on this rank (ns): its window as :mod:`kinetolens.model.steps` defines it.
    span_ns: int


@dataclass
class RankGraphs:
    """What the cross-rank path needs from one rank: picklable, a few arrays per step."""

    rank: int
    world_size: int | None
    path: str
    #: :func:`kinetolens.analysis.ranks.collectives.collective_calls` of the rank.
    calls: pl.DataFrame
    steps: dict[int, StepGraph] = field(default_factory=dict)


def rank_graphs(trace: Trace, rank: int | None = None) -> RankGraphs:
    """Every whole step's graph of one rank's trace (run where the trace is)."""
    the_rank = trace.rank if trace.rank is not None else (rank if rank is not None else 0)
    t = whole_steps(trace)
    calls = collective_calls(t)
    facts = TraceFacts.of(t)
    out = RankGraphs(rank=int(the_rank), world_size=t.world_size, path=t.path, calls=calls)
    if t.steps.height == 0:
        return out
    # the step's time is the model's window (as `dist` reports it), not its host range the graph spans
    step_ns = dict(zip(t.steps["step"].to_list(), (t.steps["end"] - t.steps["start"]).to_list()))
    for w in trace_step_windows(t):
        g = build_graph(t, w.start, w.end, facts)
        if g.events.height == 0 or w.step is None:
            continue
        sg = _step_graph(t, g, calls, int(w.step), w.start, w.end)
        sg.span_ns = int(step_ns.get(w.step, sg.span_ns))
        out.steps[int(w.step)] = sg
    return out


def _step_graph(trace: Trace, g: DependencyGraph, calls: pl.DataFrame, step: int, start: int, end: int) -> StepGraph:
    ev = g.events
    edges = g.edges
    in_step = calls.filter(pl.col("host_ts").is_between(start, end) & pl.col("timed"))
    # NCCL (and any device) calls: their first kernel's start and last one's end are graph nodes.
    gpu = ev.filter((pl.col("side") == "gpu") & pl.col("comm").fill_null(False)).select("eid", "ts", "end")
    device = in_step.filter(pl.col("kernels") > 0).select("op_id", "kernels", a_ts="ts", f_end=pl.col("ts") + pl.col("dur"))
    device = (
        device.join(gpu.select(a_eid="eid", a_ts="ts"), on="a_ts", how="inner")
        .join(gpu.select(f_eid="eid", f_end="end"), on="f_end", how="inner")
        .unique("op_id", keep="first")
        .select("op_id", arrive=2 * pl.col("a_eid"), finish=2 * pl.col("f_eid") + 1, single=(pl.col("kernels") == 1) & (pl.col("a_eid") == pl.col("f_eid")))
    )
    # Host calls (gloo): the range on gloo's thread becomes an event of the graph.
    host = in_step.filter(pl.col("kernels") == 0).select("op_id", "ts", "dur")
    items = ev.select(
        "eid", "name", where=pl.when(pl.col("side") == "cpu").then(pl.format("thread {}", pl.col("tid"))).otherwise(pl.format("stream {}", pl.col("stream"))),
        module="module", source="source",
    )
    parts = [_coded(edges, ev)]
    host_nodes = pl.DataFrame(schema=_CALL_NODES)
    nodes = g.nodes
    if host.height:
        ops = trace.ops.select("op_id", "name", "pid", "tid")
        host = host.join(ops, on="op_id", how="left").sort("ts").with_columns(eid=ev.height + pl.int_range(pl.len(), dtype=pl.Int64))
        nodes += 2 * host.height
        items = pl.concat([items, host.select("eid", "name", where=pl.format("thread {}", pl.col("tid")), module=pl.lit(None, pl.String), source=pl.lit(None, pl.String))], how="vertical_relaxed")
        parts.append(_host_call_edges(ev, host))
        host_nodes = host.select("op_id", arrive=2 * pl.col("eid"), finish=2 * pl.col("eid") + 1, single=pl.lit(True))
    e = pl.concat(parts)
    return StepGraph(
        step=step,
        src=e["src"].to_numpy(),
        dst=e["dst"].to_numpy(),
        weight=e["weight"].to_numpy(),
        bound=e["bound"].to_numpy(),
        eid=e["eid"].to_numpy(),
        nodes=nodes,
        items=items.cast(_ITEM_SCHEMA),  # type: ignore[arg-type]
        calls=pl.concat([device.cast(_CALL_NODES), host_nodes.cast(_CALL_NODES)]),  # type: ignore[arg-type]
        span_ns=end - start,
    )


def _bound(edges: pl.DataFrame, ev: pl.DataFrame) -> pl.Expr:
    """Each edge's bound: the rule of :mod:`kinetolens.analysis.paths.critical_path`."""
    t = pl.col("type")
    return (
        pl.when(t == "dependency").then(pl.lit("dependency"))
        .when(t == "sync").then(pl.lit("sync_wait"))
        .when(t == "launch").then(pl.lit("launch_overhead"))
        .when(t == "kernel_gap").then(pl.lit("kernel_gap"))
        .when(t == "cpu").then(pl.when(pl.col("data_loading").fill_null(False)).then(pl.lit("data_loading")).otherwise(pl.lit("cpu")))
        .when(pl.col("comm").fill_null(False)).then(pl.lit("communication"))
        .when(pl.col("kind").is_in(["memcpy", "memset"])).then(pl.lit("gpu_memory"))
        .otherwise(pl.lit("gpu_compute"))
    )  # fmt: skip


def _coded(edges: pl.DataFrame, ev: pl.DataFrame) -> pl.DataFrame:
    info = ev.select("eid", "kind", "data_loading", "comm")
    codes = pl.DataFrame({"b": list(BOUNDS), "bound": list(range(len(BOUNDS)))}, schema={"b": pl.String, "bound": pl.UInt8})
    return (
        edges.join(info, on="eid", how="left", maintain_order="left")
        .with_columns(b=_bound(edges, ev))
        .join(codes, on="b", how="left", maintain_order="left")
        .select("src", "dst", "weight", "bound", eid=pl.col("eid").fill_null(-1))
    )


def _host_call_edges(ev: pl.DataFrame, host: pl.DataFrame) -> pl.DataFrame:
    """A gloo call: issue (the last ``c10d::`` op begun before it on another
    thread) -> the call (its duration, communication) -> the issuing thread's
    next op begun after it ended (it waited for the call there, if anywhere)."""
    code = _CODE
    run = host.select(src=2 * pl.col("eid"), dst=2 * pl.col("eid") + 1, weight="dur", bound=pl.lit(code["communication"], pl.UInt8), eid="eid")
    cpu = ev.filter(pl.col("side") == "cpu")
    issuers = (
        cpu.filter(pl.any_horizontal(*(pl.col("name").str.starts_with(p) for p in ISSUE_PREFIXES)))
        .select("pid", i_tid="tid", i_eid="eid", i_ts="ts")
        .sort("i_ts")
    )
    issued = (
        host.sort("ts")
        .join_asof(issuers, left_on="ts", right_on="i_ts", by="pid", strategy="backward", check_sortedness=False)
        .filter(pl.col("i_eid").is_not_null() & (pl.col("i_tid") != pl.col("tid")))
    )
    issue = issued.select(src=2 * pl.col("i_eid"), dst=2 * pl.col("eid"), weight=pl.lit(0, pl.Int64), bound=pl.lit(code["dependency"], pl.UInt8), eid=pl.lit(-1, pl.Int64))
    nxt = cpu.select("pid", i_tid="tid", n_eid="eid", n_ts="ts").sort("n_ts")
    done = (
        issued.with_columns(c_end=pl.col("ts") + pl.col("dur"))
        .sort("c_end")
        .join_asof(nxt, left_on="c_end", right_on="n_ts", by=["pid", "i_tid"], strategy="forward", check_sortedness=False)
        .filter(pl.col("n_eid").is_not_null())
        .select(src=2 * pl.col("eid") + 1, dst=2 * pl.col("n_eid"), weight=pl.lit(0, pl.Int64), bound=pl.lit(code["sync_wait"], pl.UInt8), eid=pl.lit(-1, pl.Int64))
    )
    schema = {"src": pl.Int64, "dst": pl.Int64, "weight": pl.Int64, "bound": pl.UInt8, "eid": pl.Int64}
    return pl.concat([p.cast(schema) for p in (run, issue, done)])  # type: ignore[arg-type]


# --- across ranks ---------------------------------------------------------


@dataclass
class JoinedGraph:
    """One step of every rank, joined at collectives: the simulator's input.

    Edge arrays (one entry per edge, all ``np.ndarray`` of one length):
    ``src``, ``dst`` (global node ids), ``weight`` (ns, int64), ``bound``
    (codes into :data:`BOUNDS`), ``rank`` (the rank whose work the edge is;
    every edge has one), ``eid`` (row of ``items[rank]``, -1: none) and
    ``join`` (True for the edges added at collectives: arrival -> join node
    weighing 0, join node -> each rank's finish weighing the call's transfer
    time).  ``node_rank`` gives each node's rank (-1 for join nodes), and
    ``rank_offset[r]`` the first global node id of rank ``r``'s local ids.

    ``calls``: one row per rank and matched call (``group``, ``collective``,
    ``kind``, ``seq``, ``rank``, ``dur``, ``transfer_ns``, ``sync_ns``,
    ``last_rank``, ``join_node``, ``arrive``, ``finish`` as global ids).

    To predict a change, copy ``weight``, scale the entries to change (by
    ``rank``, ``bound`` or the items' names) and call :meth:`longest` with
    it; :func:`cross_rank_path` with ``weight=`` names the new path.
    """

    step: int
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    bound: np.ndarray
    rank: np.ndarray
    eid: np.ndarray
    join: np.ndarray
    nodes: int
    node_rank: np.ndarray
    rank_offset: dict[int, int]
    calls: pl.DataFrame
    items: dict[int, pl.DataFrame]
    #: Each rank's wall time of the step on its own clock (ns).
    span_ns: dict[int, int]

    @property
    def ranks(self) -> list[int]:
        return sorted(self.rank_offset)

    def longest(self, weight: np.ndarray | None = None) -> tuple[int, list[int]]:
        """The length (ns) and node ids of the heaviest path, under ``weight`` (default: the measured weights)."""
        w = self.weight if weight is None else np.asarray(weight, dtype=np.int64)
        try:
            nodes = chain_longest_path(self.src, self.dst, w, self.nodes, ties="lowest")
        except CycleError:
            raise TraceError(
                "run", f"step {self.step}: the ranks issue collectives in orders that contradict each other (a cycle)"
            ) from None
        if len(nodes) < 2:
            return 0, nodes
        edges = self.path_edges(nodes, w)
        return int(w[edges].sum()), nodes

    def path_edges(self, nodes: list[int], weight: np.ndarray | None = None) -> np.ndarray:
        """Edge indices along ``nodes`` (the heaviest of parallel edges)."""
        w = self.weight if weight is None else weight
        n = np.int64(self.nodes)
        key = self.src * n + self.dst
        p = np.asarray(nodes, dtype=np.int64)
        want = p[:-1] * n + p[1:]
        order = np.lexsort((-w, key))
        first = np.searchsorted(key[order], want)
        return order[first]

    def rank_edges(self, rank: int) -> np.ndarray:
        """Boolean mask of the edges of ``rank``'s own work (join edges excluded)."""
        return (self.rank == rank) & ~self.join


def joined_graph(ranks: list[RankGraphs], step: int) -> JoinedGraph:
    """Step ``step`` of every rank that has it, joined at its matched collectives."""
    present = [(rg, rg.steps[step]) for rg in ranks if step in rg.steps]
    if not present:
        raise TraceError("run", f"no rank has a whole step {step}")
    offsets: dict[int, int] = {}
    total = 0
    for rg, sg in present:
        offsets[rg.rank] = total
        total += sg.nodes
    summaries = [RankSummary(rank=rg.rank, world_size=rg.world_size, path=rg.path, backend=None, calls=rg.calls) for rg, _ in present]
    matched = matched_calls(summaries)
    nodes_of = pl.concat(
        [sg.calls.with_columns(rank=pl.lit(rg.rank, pl.Int64), off=pl.lit(offsets[rg.rank], pl.Int64)) for rg, sg in present]
    )
    key = ["group", "collective", "seq"]
    calls = (
        matched.select(*key, "kind", "rank", "op_id", "dur", "transfer_ns", "sync_ns", "last_rank")
        .join(nodes_of, on=["rank", "op_id"], how="inner")
        .with_columns(arrive=pl.col("arrive") + pl.col("off"), finish=pl.col("finish") + pl.col("off"))
        .filter(pl.len().over(key) > 1)
        .sort(*key, "rank")
    )
    if calls.height:
        calls = calls.with_columns(join_node=total + pl.struct(key).rank("dense").cast(pl.Int64) - 1)
        joins = calls["join_node"].n_unique()
    else:
        calls = calls.with_columns(join_node=pl.lit(None, pl.Int64))
        joins = 0
    src = np.concatenate([sg.src + offsets[rg.rank] for rg, sg in present])
    dst = np.concatenate([sg.dst + offsets[rg.rank] for rg, sg in present])
    weight = np.concatenate([sg.weight for _, sg in present]).astype(np.int64)
    bound = np.concatenate([sg.bound for _, sg in present]).astype(np.uint8)
    eid = np.concatenate([sg.eid for _, sg in present]).astype(np.int64)
    rank = np.concatenate([np.full(sg.src.size, rg.rank, dtype=np.int64) for rg, sg in present])
    # The waiting rank's own arrival -> finish edge goes: its wait is the path through the last rank.
    single = calls.filter(pl.col("single"))
    if single.height:
        n = np.int64(total)
        keep = ~np.isin(src * n + dst, single["arrive"].to_numpy() * n + single["finish"].to_numpy())
        src, dst, weight, bound, eid, rank = src[keep], dst[keep], weight[keep], bound[keep], eid[keep], rank[keep]
    base = src.size
    c_rank = calls["rank"].to_numpy().astype(np.int64)
    j = calls["join_node"].to_numpy().astype(np.int64) if calls.height else np.zeros(0, np.int64)
    # The finish edge names the rank's call event (its kernel, or its gloo range).
    f_eid = (calls["finish"].to_numpy() - calls["off"].to_numpy()) // 2 if calls.height else np.zeros(0, np.int64)
    src = np.concatenate([src, calls["arrive"].to_numpy().astype(np.int64), j])
    dst = np.concatenate([dst, j, calls["finish"].to_numpy().astype(np.int64)])
    weight = np.concatenate([weight, np.zeros(calls.height, np.int64), calls["transfer_ns"].to_numpy().astype(np.int64)])
    bound = np.concatenate([bound, np.full(calls.height, _CODE["dependency"], np.uint8), np.full(calls.height, _CODE["communication"], np.uint8)])
    eid = np.concatenate([eid, np.full(calls.height, -1, np.int64), f_eid.astype(np.int64)])
    rank = np.concatenate([rank, c_rank, c_rank])
    join = np.zeros(src.size, dtype=bool)
    join[base:] = True
    node_rank = np.full(total + joins, -1, dtype=np.int64)
    for rg, sg in present:
        node_rank[offsets[rg.rank] : offsets[rg.rank] + sg.nodes] = rg.rank
    return JoinedGraph(
        step=step, src=src, dst=dst, weight=weight, bound=bound, rank=rank, eid=eid, join=join,
        nodes=total + joins, node_rank=node_rank, rank_offset=offsets, calls=calls.drop("off"),
        items={rg.rank: sg.items for rg, sg in present}, span_ns={rg.rank: sg.span_ns for rg, sg in present},
    )  # fmt: skip


# --- the path and what it says ---------------------------------------------


@dataclass
class CrossRankPath:
    step: int
    ranks: int
    length_us: float
    #: The slowest rank's wall time of the step (us), on its own clock.
    slowest_step_us: float
    #: ``order``, ``rank``, ``bound_by``, ``us``, ``name``, ``where``, ``module``, ``source``, ``join``.
    path: pl.DataFrame
    summary: pl.DataFrame
    #: Per rank: ``us`` and ``pct`` of the path on its work.
    by_rank: pl.DataFrame
    #: The calls on the path: ``collective``, ``kind``, ``seq``, ``gate_rank``
    #: (the rank the path arrived from), ``held_ms`` (how much later it arrived
    #: than the other ranks' median, from durations).
    gates: pl.DataFrame
    #: Per rank: the matched calls of the step it arrived last at, and the most it held one (ms).
    last_at: pl.DataFrame
    verdict: str
    #: The rank that gates the step (see :func:`verdict`).
    gate_rank: int | None = None

    def top(self, by: str, n: int = 10) -> pl.DataFrame:
        return top_items(self.path, by, self.length_us, n)


def cross_rank_path(graph: JoinedGraph, weight: np.ndarray | None = None) -> CrossRankPath:
    """The longest path of a joined step and which rank's work gates it."""
    w = graph.weight if weight is None else np.asarray(weight, dtype=np.int64)
    length, nodes = graph.longest(w)
    idx = graph.path_edges(nodes, w) if len(nodes) > 1 else np.zeros(0, np.int64)
    p = pl.DataFrame(
        {
            "order": np.arange(idx.size, dtype=np.int64),
            "rank": graph.rank[idx],
            "bound_by": np.asarray(BOUNDS, dtype=object)[graph.bound[idx]].astype(str) if idx.size else np.zeros(0, dtype=str),
            "us": w[idx] / 1000,
            "eid": graph.eid[idx],
            "join": graph.join[idx],
            "src": graph.src[idx],
            "dst": graph.dst[idx],
        },
        schema={"order": pl.Int64, "rank": pl.Int64, "bound_by": pl.String, "us": pl.Float64, "eid": pl.Int64, "join": pl.Boolean, "src": pl.Int64, "dst": pl.Int64},
    )
    items = pl.concat(
        [graph.items[r].with_columns(rank=pl.lit(r, pl.Int64)).cast({"name": pl.String, "module": pl.String, "source": pl.String}) .filter(pl.col("eid").is_in(p.filter(pl.col("rank") == r)["eid"].implode())) for r in p["rank"].unique().to_list()]
    ) if p.height else pl.DataFrame(schema={"eid": pl.Int64, "name": pl.String, "where": pl.String, "module": pl.String, "source": pl.String, "rank": pl.Int64})
    path = p.join(items, on=["rank", "eid"], how="left").sort("order")
    length_us = length / 1000
    summary = summarize(path.filter(pl.col("bound_by") != "dependency"), length_us)
    ranks_share = by_rank(path, length_us)
    # Who arrived last, and by how much, is measured (durations): it says
    # nothing about a re-timed graph, whose gates are the path's alone.
    gates = _gates(graph, path)
    last_at = _last_at(graph) if weight is None else _last_at(graph).clear()
    if weight is not None:
        gates = gates.with_columns(held_ms=pl.lit(None, pl.Float64))
    cp = CrossRankPath(
        step=graph.step, ranks=len(graph.rank_offset), length_us=length_us,
        slowest_step_us=max(graph.span_ns.values()) / 1000 if graph.span_ns else 0.0,
        path=path.drop("src", "dst"), summary=summary, by_rank=ranks_share, gates=gates, last_at=last_at, verdict="",
    )  # fmt: skip
    cp.gate_rank = gate_rank(cp)
    cp.verdict = verdict(cp)
    return cp


def _held(calls: pl.DataFrame) -> pl.DataFrame:
    """Per call and rank: how much later (ms) the rank arrived than the other ranks' median (0 if earlier).

    All ranks finish a call together, so a shorter duration is a later
    arrival: ``median(others' dur) - dur``.  The others' median is read off
    the call's sorted durations with this rank's left out (no loop per call).
    """
    key = ["group", "collective", "seq"]
    srt = calls.sort(*key, "dur", "rank").with_columns(pos=pl.int_range(pl.len()).over(key), m=pl.len().over(key) - 1)
    srt = srt.join(srt.group_by(key, maintain_order=True).agg(d=pl.col("dur")), on=key, how="left")

    def others(k: pl.Expr) -> pl.Expr:
        """The k-th (0-based) of the others' sorted durations."""
        return pl.col("d").list.get(k + (k >= pl.col("pos")).cast(pl.Int64), null_on_oob=True)

    half = pl.col("m") // 2
    med = pl.when(pl.col("m") == 0).then(None).when(pl.col("m") % 2 == 1).then(others(half)).otherwise((others(half - 1) + others(half)) / 2)
    # A rank that arrived before the others' median held nobody.
    return srt.with_columns(held_ms=((med - pl.col("dur")) / 1e6).clip(lower_bound=0.0)).drop("d", "pos", "m")


def _gates(graph: JoinedGraph, path: pl.DataFrame) -> pl.DataFrame:
    """The calls the path goes through, and the rank it arrived from."""
    schema = {"collective": pl.String, "kind": pl.String, "seq": pl.Int64, "gate_rank": pl.Int64, "held_ms": pl.Float64}
    if graph.calls.height == 0 or path.height == 0:
        return pl.DataFrame(schema=schema)
    into = path.filter(pl.col("join") & pl.col("dst").is_in(graph.calls["join_node"].unique().implode()))
    held = _held(graph.calls).select("join_node", "rank", "collective", "kind", "seq", "held_ms")
    return (
        into.select(join_node="dst", gate_rank="rank", order="order")
        .join(held, left_on=["join_node", "gate_rank"], right_on=["join_node", "rank"], how="left")
        .sort("order")
        .select(list(schema))
        .cast(schema)  # type: ignore[arg-type]
    )


def _last_at(graph: JoinedGraph) -> pl.DataFrame:
    """Per rank: how many of the step's matched calls it arrived last at, of how many, and its largest hold (ms)."""
    if graph.calls.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int64, "last": pl.UInt32, "calls": pl.UInt32, "kinds": pl.List(pl.String), "held_ms": pl.Float64})
    held = _held(graph.calls)
    n_calls = held.select(pl.struct("group", "collective", "seq").n_unique()).item()
    last = held.filter(pl.col("rank") == pl.col("last_rank"))
    return (
        last.group_by("rank")
        .agg(last=pl.len(), kinds=pl.col("kind").unique().sort(), held_ms=pl.col("held_ms").max())
        .with_columns(calls=pl.lit(n_calls, pl.UInt32))
        .sort("last", "held_ms", descending=True)
    )


#: Bounds that are no rank's own work: waiting for, or moving data with, the others.
NOT_OWN = ("dependency", "communication", "sync_wait")


def own_work(path: pl.DataFrame) -> pl.DataFrame:
    """Per rank: its own work's time on the path (us), largest first (ties: the lowest rank)."""
    own = path.filter(~pl.col("join") & ~pl.col("bound_by").is_in(NOT_OWN))
    return own.group_by("rank").agg(us=pl.col("us").sum()).filter(pl.col("us") > 0).sort("us", "rank", descending=[True, False])


def gate_rank(cp: CrossRankPath) -> int | None:
    """The rank with the most of its own work on the path (by time), else the
    rank holding most of the path.

    Not the rank the path arrives from at most collectives: a rank that sleeps
    once and then comes first at most calls leaves the other rank last at the
    small calls after it, so counting calls names a rank holding the step for
    microseconds over one holding it for its whole sleep."""
    own = own_work(cp.path) if cp.path.height else pl.DataFrame()
    if own.height:
        return int(own["rank"][0])
    return int(cp.by_rank["rank"][0]) if cp.by_rank.height else None


def verdict(cp: CrossRankPath) -> str:
    """One line: the rank that gates the step, its work that does, and for how long.

    The rank is the one with the most of its own work on the path
    (:func:`gate_rank`); its work, the bound of most of its time on the path;
    how long, the most it arrived after the other ranks' median at one of
    the step's calls (from durations).
    """
    r = gate_rank(cp)
    if r is None:
        return f"step {cp.step}: no path"
    own = cp.path.filter(~pl.col("join") & ~pl.col("bound_by").is_in(NOT_OWN))
    mine = own.filter(pl.col("rank") == r).group_by("bound_by").agg(pl.col("us").sum()).sort("us", descending=True)
    what = BOUND_WORDS.get(mine["bound_by"][0], mine["bound_by"][0]) if mine.height else "communication"
    verb = "hold" if what.endswith("s") else "holds"
    row = cp.last_at.filter(pl.col("rank") == r)
    bound = f"rank {r}'s {what} bound{'' if verb == 'hold' else 's'} step {cp.step} ({cp.length_us / 1000:,.1f} ms on the path)"
    gated = cp.gates.filter(pl.col("gate_rank") == r).height
    if row.height == 0 and gated:
        return f"{bound}, arriving last at {gated} collective{'s' if gated > 1 else ''} on it"
    if row.height == 0:
        return f"{bound}; no collective waits for it"
    kinds = row["kinds"][0].to_list()
    noun = KIND_WORDS.get(kinds[0], kinds[0]) if len(kinds) == 1 else "collective"
    last, calls = int(row["last"][0]), int(row["calls"][0])
    which = f"every {noun}" if last == calls else f"{last} of {calls} {noun}s"
    return f"rank {r}'s {what} {verb} {which} of step {cp.step} for {float(row['held_ms'][0]):,.1f} ms"


# --- a run ------------------------------------------------------------------


def common_steps(ranks: list[RankGraphs]) -> list[int]:
    """Steps every rank has whole, in order (else those any rank has)."""
    sets = [set(rg.steps) for rg in ranks if rg.steps]
    if not sets:
        return []
    both = set.intersection(*sets)
    return sorted(both or set.union(*sets))


def combined(paths: list[CrossRankPath]) -> tuple[pl.DataFrame, float]:
    """All steps' path edges together, and their total length (us)."""
    parts = [cp.path.with_columns(step=pl.lit(cp.step, pl.Int64)) for cp in paths]
    return (pl.concat(parts) if parts else pl.DataFrame()), sum(cp.length_us for cp in paths)


def by_rank(path: pl.DataFrame, length_us: float) -> pl.DataFrame:
    """Path time per rank (us, % of the length), largest first; a call's
    transfer time counts for the rank whose finish the path went on to."""
    return (
        path.group_by("rank").agg(us=pl.col("us").sum())
        .with_columns(pct=100 * pl.col("us") / length_us if length_us else pl.lit(0.0))
        .sort("us", "rank", descending=[True, False])
    )  # fmt: skip


def top_work(path: pl.DataFrame, length_us: float, n: int = 10) -> pl.DataFrame:
    """The path's time per rank, name and bound, largest first."""
    p = path.filter((pl.col("us") > 0) & pl.col("name").is_not_null())
    return (
        p.group_by("rank", "name", "bound_by").agg(us=pl.col("us").sum())
        .sort("us", "rank", "name", descending=[True, False, False]).head(n)
        .with_columns(pct=100 * pl.col("us") / length_us if length_us else pl.lit(0.0))
    )  # fmt: skip
