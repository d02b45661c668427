"""What-if: re-time a step's dependency graph with changes and predict its time.

The step's graph (:mod:`kinetolens.analysis.paths.dependency_graph`) is replayed
as a max-plus system: a node happens when the last of its dependencies has
happened, plus what the edges in between take.  Every measured node time
is explained as ``max(dependency + edge weight) + residual``; the residual
is the part of the node's delay the graph has no cause for (Python between
top-level ops, a wait on something not traced) and it stays as measured.
Changes scale edge weights; a sync, a queued kernel or a data wait then
shrinks on its own, because the node it waited for moves.  With no change
the replay gives back every measured time exactly.

What is added to the critical-path graph for re-timing:

* stream order: every activity waits for the previous one on its stream
  (the graph only links the queued ones, the others waited for their
  launch), with the measured gap or, where the stream sat empty, the
  step's median gap between queued activities;
* a queued kernel's launch edge weighs the step's median launch delay on an
  empty stream (capped by what was measured), so that a kernel whose stream
  empties after a change waits for its launch as such kernels did;
* thread joins: a thread idle until just after another thread's op ended
  waited for it (``backward()``'s caller and the autograd thread);
* carry-over: a stream's first activity waits for the previous step's work
  on that stream, which ends where it did relative to the step's start.

The step ends when its host range and every GPU activity it launched have
ended (:mod:`kinetolens.model.steps`); the predicted step time is the
measured one less the shift of that end, and never below the busiest
stream's own work.  The longest path is taken with
:func:`kinetolens.analysis.paths.longest_path.longest_path` over the re-timed
graph plus a source (each unconstrained node's measured start) and a sink
(the step's end), so it is the new critical path.
"""

from __future__ import annotations

from collections.abc import Iterator
import dataclasses
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from kinetolens.analysis.paths.critical_path import (
    _PATH_SCHEMA,
    Window,
    _clipped,
    _path_table,
    step_windows,
    summarize,
    whole_window,
)
from kinetolens.analysis.paths.dependency_graph import DependencyGraph, TraceFacts, build_graph
from kinetolens.analysis.paths.longest_path import Contracted
from kinetolens.analysis.paths.sampling import MIN_STEPS, SAMPLE_SHARE, SAMPLE_STEPS, SETTLED_SHARE, sample, sample_in_words, sample_size, sampled_label
from kinetolens.analysis.paths.whatif_changes import BadChange, Change, change_mask, parse_change
from kinetolens.model.trace import Trace
from kinetolens.model.vocabulary import BOUND_BY

__all__ = ["BadChange", "Change", "parse_change", "whatif", "whatif_many", "iter_replays", "retime", "prepare", "predict", "SAMPLE_STEPS"]

#: The sink edges' weight: larger than any step, so the longest path ends at the step's end.
_SINK = 1 << 50

@dataclass
class StepPrediction:
    """One window re-timed: measured and predicted time (us) and the new critical path."""

    window: Window
    measured_us: float
    predicted_us: float
    length_us: float
    path: pl.DataFrame
    summary: pl.DataFrame
    #: Edges each change matched (how many stretches it re-timed).
    matched: dict[str, int] = field(default_factory=dict)
    #: Time to the step's end off the modelled path: untraced gaps kept as measured,
    #: and the wait for work that starts on its own (a thread's first op).
    untraced_us: float = 0.0
    #: Time the path starts with waiting for the previous step's GPU work on a stream.
    carried_us: float = 0.0


@dataclass
class WhatIf:
    """The changes, every simulated step's prediction, and their means (us).

    ``of``: the complete steps the trace has; fewer were simulated when a
    sample was asked for (:func:`whatif_many`'s ``max_steps``)."""

    changes: list[Change]
    steps: list[StepPrediction]
    of: int | None = None
    #: The mean step with what the changes speed up taking no time (:func:`host_floor`): their floor.
    host_floor_us: float | None = None

    @property
    def at_host_floor(self) -> bool:
        """Whether the prediction is the host floor: the step is bound by host work, and
        making kernels faster still cannot shorten it (a change that saves time, 1 us slack)."""
        return self.host_floor_us is not None and self.delta_us < 0 and self.predicted_us <= self.host_floor_us + 1.0

    @property
    def sampled(self) -> str | None:
        """``"8 of 60 steps"`` when only a sample of the steps was simulated, else None."""
        if self.of is None or len(self.steps) >= self.of:
            return None
        return sampled_label(len(self.steps), self.of)

    @property
    def re_timed(self) -> str:
        """What was re-timed, in words: every step's graph, or the sample's."""
        return f"the dependency graph of {sample_in_words(self.sampled)}" if self.sampled else "each step's dependency graph"

    @property
    def measured_us(self) -> float:
        return float(np.mean([s.measured_us for s in self.steps])) if self.steps else 0.0

    @property
    def predicted_us(self) -> float:
        return float(np.mean([s.predicted_us for s in self.steps])) if self.steps else 0.0

    @property
    def delta_us(self) -> float:
        return self.predicted_us - self.measured_us

    @classmethod
    def joined(cls, parts: list[WhatIf], changes: list[Change]) -> WhatIf:
        """The what-if of several parts of a trace (each step's window, one
        after another) as one: their steps together, in time order; the
        floor is the mean over steps, as :func:`whatif` takes it."""
        steps = sorted((s for p in parts for s in p.steps), key=lambda s: s.window.start)
        floors = [(p.host_floor_us, len(p.steps)) for p in parts if p.steps]
        floor: float | None = None
        if floors and all(f is not None for f, _ in floors):
            floor = sum((f or 0.0) * n for f, n in floors) / sum(n for _, n in floors)
        return cls(changes=changes, steps=steps, of=len(steps), host_floor_us=floor)

    @property
    def matched(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.steps:
            for k, v in s.matched.items():
                out[k] = out.get(k, 0) + v
        return out

    def summary(self) -> pl.DataFrame:
        """The new critical paths' bound-by split per step (the mean over steps),
        with ``untraced``: the rest of the time to the step's end."""
        empty = pl.DataFrame(schema={"bound_by": pl.String, "us": pl.Float64, "pct": pl.Float64, "edges": pl.Int64})
        if not self.steps:
            return empty
        n = len(self.steps)
        untraced = sum(s.untraced_us for s in self.steps)
        carried = sum(s.carried_us for s in self.steps)
        total = sum(s.length_us for s in self.steps) + untraced + carried
        # Each step's path summarized when it was re-timed (its table is not kept): times and edges add up.
        order = {b: i for i, b in enumerate(BOUND_BY)}
        out = (
            pl.concat([s.summary for s in self.steps])
            .group_by("bound_by")
            .agg(pl.col("us").sum(), pl.col("edges").sum())
            .sort(pl.col("bound_by").replace_strict(order, default=len(order), return_dtype=pl.Int64))
            .select("bound_by", "us", (100 * pl.col("us") / total if total else pl.lit(0.0)).alias("pct"), "edges")
            .cast(empty.schema)
        )
        pct = [100 * v / total if total else 0.0 for v in (carried, untraced)]
        rest = pl.DataFrame({"bound_by": ["previous_step", "untraced"], "us": [carried, untraced], "pct": pct, "edges": [0, 0]}, schema=empty.schema)
        rest = rest.filter(pl.col("us") > 0)
        return pl.concat([out, rest]).with_columns(pl.col("us") / n, (pl.col("edges") // n).cast(pl.Int64))


def spread_order(positions: list[int]) -> list[int]:
    """``positions`` in an order whose every prefix is spread over them: the
    middle one first, then each time the one farthest from all taken (the
    earlier of equals), so that stopping after any prefix samples the whole trace."""
    left = sorted(positions)
    if not left:
        return []
    taken = [left.pop(len(left) // 2)]
    while left:
        far = max(left, key=lambda p: (min(abs(p - t) for t in taken), -p))
        left.remove(far)
        taken.append(far)
    return taken


def settled(effects: list[list[float]], step_us: float, share: float = SETTLED_SHARE) -> bool:
    """Whether each change set's per-step effects (``effects[c][i]``: step
    ``i``'s predicted less measured time, us) have a mean known to ``share``
    of the step: a standard error (sample deviation over the square root of
    the count) at most that, once :data:`MIN_STEPS` steps are in."""
    if not effects or len(effects[0]) < MIN_STEPS:
        return False
    limit = share * step_us
    return all(float(np.std(e, ddof=1)) / np.sqrt(len(e)) <= limit for e in effects)


def _windows(trace: Trace, step: int | None) -> tuple[Trace, list[Window]]:
    """The trace to re-time and its windows: ``step``'s, every complete step's, or the whole trace without steps."""
    from kinetolens.analysis.paths.critical_path import step_window
    from kinetolens.analysis.session import whole_steps

    if step is not None:
        return trace, [step_window(trace, step)]
    trace = whole_steps(trace)
    return trace, (step_windows(trace) if trace.steps.height else [whole_window(trace)])


def iter_replays(trace: Trace, windows: list[Window]) -> Iterator[Replay]:
    """Each window's graph prepared for re-timing, one at a time: a caller that
    drops each replay before asking for the next holds one step's graph, however
    many steps the trace has (windows without events are skipped)."""
    facts = TraceFacts.of(trace)
    for w in windows:
        graph = build_graph(trace, w.start, w.end, facts)
        if graph.events.height == 0:
            continue
        row = trace.steps.filter(pl.col("step") == w.step) if w.step is not None else trace.steps.clear()
        measured = float(row["dur"][0]) if row.height else None
        yield prepare(graph, measured_ns=measured, step_name=w.label if w.step is not None else None, window=w)
        del graph  # before the next window's is built


def replays(trace: Trace, step: int | None = None) -> list[Replay]:
    """Every complete step (or ``step``) prepared for re-timing; the whole trace without steps."""
    return list(iter_replays(*_windows(trace, step)))


def host_floor(changes: list[Change]) -> list[Change] | None:
    """The changes taken to the limit: what each one speeds up (factor below 1) takes no
    time.  None when no change speeds anything up (there is no floor to reach)."""
    faster = [c for c in changes if c.kind in ("kernel", "op", "module", "category") and c.factor is not None and c.factor < 1]
    if not faster:
        return None
    return [dataclasses.replace(c, factor=0.0, spec=f"{c.spec} (at 0)") if c in faster else c for c in changes]


def whatif(trace: Trace, changes: list[Change], step: int | None = None) -> WhatIf:
    """Predict each complete step's time (or ``step``'s) after ``changes``, with
    their floor (:func:`host_floor`) beside it, re-timed on the same graphs."""
    floor = host_floor(changes)
    if floor is None:
        return whatif_many(trace, [changes], step, max_steps=None)[0]
    result, at_zero = whatif_many(trace, [changes, floor], step, max_steps=None)
    result.host_floor_us = at_zero.predicted_us if at_zero.steps else None
    return result


def whatif_many(
    trace: Trace,
    change_sets: list[list[Change]],
    step: int | None = None,
    paths: bool = True,
    max_steps: int | None = SAMPLE_STEPS,
    settle: float | None = SETTLED_SHARE,
    share: int | None = SAMPLE_SHARE,
) -> list[WhatIf]:
    """:func:`whatif` for several change sets, each step's graph built and explained once;
    ``paths=False`` predicts step times only (no new critical path tables).

    ``max_steps``: simulate at most that many complete steps, and at most one
    in ``share`` (:func:`sample_size`; of the file's steps where ``trace`` is a
    window of a longer file, :attr:`Trace.window_of_steps`), evenly spaced (None: all),
    taken middle first and spread (:func:`spread_order`); with
    ``settle``, stop as soon as every change set's mean effect is known to
    that share of the step (:func:`settled`).  Each result's ``of`` and
    ``sampled`` say how many steps there were; its steps are in time order.
    The steps are re-timed one after another, each step's graph dropped before
    the next is built, so memory does not grow with the number of steps."""
    for changes in change_sets:
        if any(c.kind == "rank" for c in changes):
            raise BadChange("rank:N=median needs a run directory with every rank's trace")
    trace, windows = _windows(trace, step)
    # A window of a longer file (read a step window at a time) is itself a
    # sample of its steps: the share is of the file's steps.
    of_steps = max(len(windows), trace.window_of_steps or 0)
    positions = sample(len(windows), None if max_steps is None else min(len(windows), sample_size(of_steps, max_steps, share)))
    stop_early = max_steps is not None and settle is not None and bool(change_sets)
    if max_steps is not None:
        positions = spread_order(positions)
    out = [WhatIf(changes=changes, steps=[], of=len(windows)) for changes in change_sets]
    for r in iter_replays(trace, [windows[i] for i in positions]):
        for result in out:
            # each step's new path is kept as its summary: a table per step would hold every step's path at once
            step = predict(r, result.changes, paths)
            result.steps.append(dataclasses.replace(step, path=step.path.clear()))
        del r  # before the next step's graph is built
        if stop_early and settled([[s.predicted_us - s.measured_us for s in o.steps] for o in out], out[0].measured_us, settle):
            break
    for result in out:
        result.steps.sort(key=lambda s: s.window.start)
    return out


def _categories(edges: pl.DataFrame, ev: pl.DataFrame) -> pl.DataFrame:
    """Each edge's bound-by category (the rules of the critical path's table)."""
    info = ev.select("eid", "side", "kind", "name", "op", "module", "data_loading", "comm", "pid", "tid", "ts", "end", "device", "stream", "launch_id", "kernel_id")
    e = edges.join(info, on="eid", how="left")
    cat = (
        pl.when(pl.col("type") == "dependency")
        .then(pl.lit("dependency"))
        .when(pl.col("type") == "sync")
        .then(pl.lit("sync_wait"))
        .when(pl.col("type") == "launch")
        .then(pl.lit("launch_overhead"))
        .when(pl.col("type") == "kernel_gap")
        .then(pl.lit("kernel_gap"))
        .when(pl.col("type") == "cpu")
        .then(pl.when(pl.col("data_loading").fill_null(False)).then(pl.lit("data_loading")).otherwise(pl.lit("cpu")))
        .when(pl.col("comm").fill_null(False))
        .then(pl.lit("communication"))
        .when(pl.col("kind").is_in(["memcpy", "memset"]))
        .then(pl.lit("gpu_memory"))
        .otherwise(pl.lit("gpu_compute"))
    )
    return e.with_columns(category=cat)


def _stream_order(ev: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """Previous activity on the stream -> the next one, for the pairs the graph left
    unlinked (the next one waited for its launch): weighted by the median queued gap."""
    gpu = ev.filter(pl.col("side") == "gpu").sort("ts", "eid").with_columns(
        prev=pl.col("eid").shift(1).over("device", "stream"), prev_end=pl.col("end").shift(1).over("device", "stream")
    ).filter(pl.col("prev").is_not_null())
    gaps = edges.filter(pl.col("type") == "kernel_gap")
    typical = float(gaps["weight"].median()) if gaps.height else 0.0
    have = gaps.select(dst_eid=pl.col("dst") // 2, has=pl.lit(True))
    missing = gpu.join(have, left_on="eid", right_on="dst_eid", how="left").filter(pl.col("has").is_null())
    return missing.select(
        src=2 * pl.col("prev") + 1,
        dst=2 * pl.col("eid"),
        weight=pl.min_horizontal(pl.lit(int(typical)), (pl.col("ts") - pl.col("prev_end")).clip(lower_bound=0)).cast(pl.Int64),
        type=pl.lit("kernel_gap"),
        eid=pl.col("prev"),
    )


#: A thread idle this long before an op (ns) may have been waiting for another thread.
JOIN_GAP_NS = 1_000_000
#: ... when another thread's op ended at most this long before it resumed (ns).
JOIN_TOLERANCE_NS = 2_000_000


def _thread_joins(ev: pl.DataFrame, edges: pl.DataFrame, t0: np.ndarray) -> pl.DataFrame:
    """A thread that sat idle until just after another thread's op ended was
    waiting for it (the caller of ``backward()`` for the autograd thread):
    that idle stretch becomes a wait on the other op's end, weighing 0."""
    cpu = ev.filter(pl.col("side") == "cpu")
    if cpu.select(pl.struct("pid", "tid").n_unique()).item() < 2:
        return edges
    span = pl.Series(t0[edges["dst"].to_numpy()] - t0[edges["src"].to_numpy()])
    idle = (
        edges.with_columns(span=span, row=pl.int_range(pl.len()))
        .filter(pl.col("type").is_in(["cpu", "dependency"]) & (pl.col("dst") % 2 == 0) & (pl.col("span") >= JOIN_GAP_NS))
        .with_columns(v_eid=pl.col("dst") // 2)
        .join(cpu.select(v_eid="eid", pid="pid", tid="tid", tv="ts"), on="v_eid", how="inner")
    )
    if idle.height == 0:
        return edges
    ends = cpu.select("pid", k_tid="tid", k_eid="eid", k_end="end").sort("k_end")
    j = (
        idle.sort("tv")
        .join_asof(ends, left_on="tv", right_on="k_end", by="pid", strategy="backward", check_sortedness=False)
        .filter(
            pl.col("k_eid").is_not_null()
            & (pl.col("k_tid") != pl.col("tid"))
            & (pl.col("tv") - pl.col("k_end") <= pl.min_horizontal(pl.lit(JOIN_TOLERANCE_NS), pl.col("span") // 8))
        )
    )
    if j.height == 0:
        return edges
    waits = j.select(src=2 * pl.col("k_eid") + 1, dst="dst", weight=pl.lit(0, pl.Int64), type=pl.lit("sync"), eid=pl.lit(None, pl.Int64))
    weight = edges["weight"].scatter(j["row"].to_numpy(), 0)
    return pl.concat([edges.with_columns(weight=weight), waits.cast(edges.schema)])


@dataclass
class Replay:
    """A step's graph made ready to re-time: the edges (categories joined),
    their measured weights, each node's residual, and the measured replay."""

    graph: DependencyGraph
    edges: pl.DataFrame
    t0: np.ndarray
    weight: np.ndarray
    residual: np.ndarray
    has_in: np.ndarray
    ends: np.ndarray
    #: Carry-over: the first activity of each stream (node) cannot start before
    #: the previous step's work on that stream ended (ns after the first node).
    carry_node: np.ndarray
    carry_ns: np.ndarray
    measured_ns: float
    window: Window
    base_ns: int = 0
    #: Edges that are a GPU stream's own work (kernels and the gaps between them).
    on_stream: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    #: Each on-stream edge's stream (a code per (device, stream); -1 off stream).
    stream_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: The longest-path searches' contracted graphs, by edge sources (:func:`_run`).
    searches: dict[bytes, Contracted] = field(default_factory=dict, repr=False)


def prepare(graph: DependencyGraph, measured_ns: float | None = None, step_name: str | None = None, window: Window | None = None) -> Replay:
    """Explain every measured node time (see the module docstring) once, for any number of change sets."""
    ev = graph.events
    n = ev.height
    t0 = np.empty(2 * n, dtype=np.int64)
    t0[0::2] = ev["ts"].to_numpy()
    t0[1::2] = ev["end"].to_numpy()
    edges = graph.edges
    # A queued kernel's launch edge: the median delay of launches onto an empty stream.
    launched = edges.filter((pl.col("type") == "launch") & (pl.col("weight") > 0))
    typical_launch = int(launched["weight"].median()) if launched.height else 0
    edges = _thread_joins(ev, pl.concat([edges, _stream_order(ev, edges)]), t0)
    span = t0[edges["dst"].to_numpy()] - t0[edges["src"].to_numpy()]
    weight = edges["weight"].to_numpy()
    queued = (edges["type"].to_numpy() == "launch") & (weight == 0)
    weight = np.where(queued, np.clip(np.minimum(typical_launch, span), 0, None), weight)
    # Edges the measured times contradict are not dependencies.
    edges = edges.with_columns(weight=pl.Series(weight, dtype=pl.Int64)).filter(pl.Series(span >= weight))
    e = _categories(edges, ev)
    src = e["src"].to_numpy()
    dst = e["dst"].to_numpy()
    w = e["weight"].to_numpy().astype(np.int64)
    # Residual: how much later each node happened than its dependencies explain.
    origin = int(t0.min())
    carry_node, carry_ns = _carry(ev, origin)
    explained = np.full(2 * n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(explained, dst, t0[src] + w)
    np.maximum.at(explained, carry_node, origin + carry_ns)
    has_in = explained > np.iinfo(np.int64).min
    residual = np.where(has_in, t0 - explained, 0)
    step_node = _step_end_node(ev, step_name)
    gpu_ends = 2 * ev.filter(pl.col("side") == "gpu")["eid"].to_numpy() + 1
    ends = np.concatenate([[step_node] if step_node is not None else _sinks(src, 2 * n), gpu_ends]).astype(np.int64)
    replay = Replay(
        graph=graph, edges=e, t0=t0, weight=w, residual=residual, has_in=has_in, ends=ends, measured_ns=0.0,
        carry_node=carry_node, carry_ns=carry_ns,
        window=window or Window(label="window", start=graph.start, end=graph.end),
        on_stream=e["type"].is_in(["kernel", "kernel_gap"]).to_numpy(),
    )  # fmt: skip
    replay.stream_of = _stream_codes(e, replay.on_stream)
    # With the measured weights the replay gives back every measured time
    # (each node's residual is what its dependencies leave unexplained), so
    # the step ends where its last end node did: no search needed.
    replay.base_ns = int(t0[ends].max()) - origin if ends.size else 0
    replay.measured_ns = float(measured_ns) if measured_ns is not None else float(replay.base_ns)
    return replay


def _stream_codes(e: pl.DataFrame, on_stream: np.ndarray) -> np.ndarray:
    """Each edge's GPU stream as a small integer (one per device and stream), -1 for edges off any stream."""
    codes = e.select(pl.struct("device", "stream").rank("dense").cast(pl.Int64) - 1)[:, 0].to_numpy()
    return np.where(on_stream, codes, -1)


def _carry(ev: pl.DataFrame, origin: int) -> tuple[np.ndarray, np.ndarray]:
    """Start nodes of each stream's first activity in the window that was queued
    behind earlier work (the previous step's), and when that work ended (ns after ``origin``).
    The previous step is taken to end as measured, relative to this one's start."""
    if "busy_until" not in ev.columns:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # The columns first: a filter, a sort and a group's first row copy every column they keep.
    gpu = ev.select("side", "eid", "ts", "device", "stream", "busy_until").filter(pl.col("side") == "gpu")
    if gpu.height == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = gpu.sort("ts", "eid").group_by("device", "stream", maintain_order=True).first()
    first = first.filter(pl.col("busy_until").is_not_null() & (pl.col("busy_until") > origin) & (pl.col("busy_until") <= pl.col("ts")))
    return (2 * first["eid"].to_numpy()).astype(np.int64), (first["busy_until"].to_numpy() - origin).astype(np.int64)


def _run(r: Replay, weights: np.ndarray, src: np.ndarray | None = None, path: bool = True) -> tuple[int, list[int]]:
    """The step's end (ns from its first node) under ``weights`` (and edge sources
    ``src``, default the graph's), and the path to it (none listed without ``path``)."""
    n2 = r.t0.size
    dst = r.edges["dst"].to_numpy()
    src = r.edges["src"].to_numpy() if src is None else src
    s_node, t_node = n2, n2 + 1
    origin = int(r.t0.min())
    sources = np.flatnonzero(~r.has_in)
    extra_src = [np.full(sources.size, s_node), r.ends, np.full(r.carry_node.size, s_node)]
    extra_dst = [sources, np.full(r.ends.size, t_node), r.carry_node]
    extra_w = [r.t0[sources] - origin, np.full(r.ends.size, _SINK), r.carry_ns + r.residual[r.carry_node]]
    a = np.concatenate([src, *extra_src])
    b = np.concatenate([dst, *extra_dst])
    ww = np.concatenate([weights + r.residual[dst], *extra_w]).astype(np.int64)
    # Change sets change weights, and an overlap the sources of some edges: the
    # contracted graph is built once per distinct topology of the step.
    key = src.tobytes()
    if key not in r.searches:
        r.searches[key] = Contracted(a, b, n2 + 2)
    if not path:
        total = r.searches[key].length(ww)
        return (total - _SINK if total is not None else 0), []
    nodes = r.searches[key].path(ww)
    if len(nodes) < 2:
        return 0, nodes
    key = a * np.int64(n2 + 2) + b
    p = np.asarray(nodes, dtype=np.int64)
    order = np.lexsort((-ww, key))
    on = order[np.searchsorted(key[order], p[:-1] * np.int64(n2 + 2) + p[1:])]
    return int(ww[on].sum()) - _SINK, nodes


def predict(r: Replay, changes: list[Change], paths: bool = True) -> StepPrediction:
    """The prepared step re-timed with ``changes`` (and its new critical path, with ``paths``)."""
    e, ev = r.edges, r.graph.events
    factor = np.ones(e.height)
    matched: dict[str, int] = {}
    src = e["src"].to_numpy().copy()
    moved = False
    for c in changes:
        mask = change_mask(e, ev, c).to_numpy()
        matched[c.spec] = int(mask.sum())
        factor[mask] *= c.factor if c.factor is not None else 1.0
        if c.kind == "overlap":
            # Overlapped: what waited for a collective's end waits for its start; the
            # collective still runs its time on its stream, and the step waits for it.
            src[mask] -= 1
            moved = moved or bool(mask.any())
    new_w = np.rint(r.weight * factor).astype(np.int64)
    # Changes that scale no edge's weight and move no source leave the measured
    # replay as it was (a trace without data loading, say): no search to run.
    changed = moved or bool((new_w != r.weight).any())
    new, nodes = _run(r, new_w, src, paths) if changed else (r.base_ns, _run(r, r.weight)[1] if paths else [])
    predicted = r.measured_ns - (r.base_ns - new)
    # A stream cannot run its step's work faster than back to back.
    stream = r.on_stream
    if stream.any():
        busy = np.bincount(r.stream_of[stream], weights=new_w[stream])
        predicted = max(predicted, float(busy.max()))
    if not paths:  # the step's time only: no path table to build
        empty = pl.DataFrame(schema=_PATH_SCHEMA)
        return StepPrediction(
            window=r.window, measured_us=r.measured_ns / 1000, predicted_us=max(predicted, 0.0) / 1000,
            length_us=0.0, path=empty, summary=summarize(empty, 0.0), matched=matched,
            untraced_us=max(predicted, 0.0) / 1000 if r.window.clip is not None else new / 1000,
        )  # fmt: skip
    n2 = r.t0.size
    path_nodes = [v for v in nodes if v < n2] if paths else []
    new_graph = DependencyGraph(events=ev, edges=e.select("dst", "type", "eid", src=pl.Series(src), weight=pl.Series(new_w)), start=r.graph.start, end=r.graph.end)
    path = _path_table(new_graph, path_nodes)
    if r.window.clip is not None and path.height:
        # The graph starts at the step's host range; the step's time (measured and
        # predicted) starts at its window (a step that opens waiting for the
        # previous one's GPU work starts when that work ends): the path is shown from there.
        path = _clipped(path, r.window.clip[0], int(path["start_us"].max() * 1000 + path["us"].max() * 1000) + 1)
    length = float(path["us"].sum()) if path.height else 0.0
    carried = 0.0
    if path_nodes and path_nodes[0] in set(r.carry_node.tolist()):
        i = int(np.flatnonzero(r.carry_node == path_nodes[0])[0])
        carried = float(r.carry_ns[i]) / 1000
    shown_us = max(predicted, 0.0) / 1000 if r.window.clip is not None else new / 1000
    return StepPrediction(
        window=r.window,
        measured_us=r.measured_ns / 1000,
        predicted_us=max(predicted, 0.0) / 1000,
        length_us=length,
        path=path,
        summary=summarize(path, length),
        matched=matched,
        untraced_us=max(shown_us - length - carried, 0.0),
        carried_us=carried,
    )


def retime(
    graph: DependencyGraph,
    changes: list[Change],
    measured_ns: float | None = None,
    step_name: str | None = None,
    window: Window | None = None,
) -> StepPrediction:
    """Replay ``graph`` with ``changes``; ``measured_ns``: the step's measured time (default: its graph's span)."""
    return predict(prepare(graph, measured_ns, step_name, window), changes)


def _step_end_node(ev: pl.DataFrame, step_name: str | None) -> int | None:
    """The end node of the step's own host range (``ProfilerStep#N``), if it is in the graph."""
    if step_name is None:
        return None
    row = ev.filter((pl.col("side") == "cpu") & (pl.col("name") == step_name)).sort("ts")
    return int(2 * row["eid"][0] + 1) if row.height else None


def _sinks(src: np.ndarray, nodes: int) -> np.ndarray:
    """Nodes nothing depends on."""
    out = np.ones(nodes, dtype=bool)
    out[src] = False
    return np.flatnonzero(out)
