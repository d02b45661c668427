"""What bounds a step: the longest path through its dependency graph.

The path (:mod:`kinetolens.analysis.paths.dependency_graph`) runs through CPU
ops, launches, kernels and synchronizations; its length is the sum of its
edges' weights, and each edge says what bounded that stretch:

* ``cpu``: an op or runtime call running on a CPU thread;
* ``data_loading``: CPU time inside a DataLoader ``__next__``;
* ``launch_overhead``: a runtime launch call -> its kernel starting, on an empty stream;
* ``kernel_gap``: idle time between a kernel and the next one queued on its stream;
* ``gpu_compute``: kernels; ``gpu_memory``: memcpy / memset; ``communication``: NCCL kernels;
* ``sync_wait``: a GPU -> CPU or GPU -> GPU synchronization (0 us: the wait
  itself is the GPU work the path goes through);
* ``dependency``: one top-level op to the next on a thread (0 us).

The length is below the path's span (its last minus its first timestamp)
by the time between top-level ops that nothing traced covers.  The longest
path is taken on the graph's edge arrays (:mod:`kinetolens.analysis.paths.longest_path`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from kinetolens.analysis.paths.dependency_graph import DependencyGraph, TraceFacts, build_graph
from kinetolens.analysis.paths.longest_path import CycleError
from kinetolens.analysis.paths.longest_path import longest_path as chain_longest_path
from kinetolens.analysis.trace_kind import clock_offset
from kinetolens.errors import TraceError
from kinetolens.model.trace import Trace
from kinetolens.model.vocabulary import BOUND_BY


_PATH_SCHEMA = {
    "order": pl.Int64,
    "type": pl.String,
    "bound_by": pl.String,
    "us": pl.Float64,
    "name": pl.String,
    "op": pl.String,
    "module": pl.String,
    "source": pl.String,
    "where": pl.String,
    "ts_us": pl.Float64,
    "start_us": pl.Float64,
}


class EmptyWindow(TraceError):
    """A window without CPU ops or runtime calls: there is no path to take."""


@dataclass
class Window:
    """The analysed window: CPU ops starting in ``[start, end]`` (ns) and what they launched."""

    label: str
    start: int
    end: int
    step: int | None = None
    #: The step's own window (ns) as the model cuts it (:mod:`kinetolens.model.steps`), which
    #: ``summary`` and ``dist`` report: the path is cut to it, so a step's path is no longer than its step.
    clip: tuple[int, int] | None = None


@dataclass
class CriticalPath:
    window: Window
    length_us: float
    span_us: float
    path: pl.DataFrame
    summary: pl.DataFrame
    nodes: int
    edges: int
    #: Why some figures may mislead (a GPU clock offset from the CPU's).
    notes: list[str] = field(default_factory=list)
    #: The window's time (us) from its start to the later of its end and its
    #: last activity's end, and the parts of it the path does not reach:
    #: before its first node (before the first traced op on it) and after its
    #: last (work that no traced dependency ties to the path).  With the
    #: untraced time between ops (``span_us - length_us``) they add up:
    #: ``before_us + span_us + after_us == window_us``.
    window_us: float = 0.0
    before_us: float = 0.0
    after_us: float = 0.0

    @property
    def untraced_us(self) -> float:
        """The path's span its edges do not cover: time between top-level ops nothing traced."""
        return max(self.span_us - self.length_us, 0.0)

    def top(self, by: str, n: int = 10) -> pl.DataFrame:
        """The path's time per ``by`` (``name``, ``op``, ``module``, ``source``), largest first."""
        return top_items(self.path, by, self.length_us, n)


def step_window(trace: Trace, step: int) -> Window:
    row = trace.steps.filter(pl.col("step") == step)
    if row.height == 0:
        have = ", ".join(str(s) for s in trace.steps["step"].to_list()) or "none"
        raise TraceError(trace.path, f"has no step {step} (steps: {have})")
    r = row.row(0, named=True)
    clip = (int(r["start"]), int(r["end"]))
    return Window(label=str(r["name"]), start=int(r["ts"]), end=int(r["cpu_end"]), step=step, clip=clip)


def annotation_window(trace: Trace, annotation: str, instance: int = 0) -> Window:
    """HTA's window rule: the ``instance``-th (0-based, by start) host range whose name contains ``annotation``."""
    ranges = pl.concat(
        [trace.ops.select("name", "ts", "end"), trace.python.select("name", "ts", "end")]
    ).filter(pl.col("name").str.contains(annotation, literal=True)).sort("ts")
    if ranges.height == 0:
        raise TraceError(trace.path, f"has no host range whose name contains {annotation!r}")
    if not 0 <= instance < ranges.height:
        raise TraceError(trace.path, f"has {ranges.height} ranges named like {annotation!r}; instance {instance} is out of range")
    r = ranges.row(instance, named=True)
    return Window(label=f"{r['name']} #{instance}", start=int(r["ts"]), end=int(r["end"]))


def whole_window(trace: Trace) -> Window:
    host = pl.concat([trace.ops.select("ts", "end"), trace.runtime.select("ts", "end")])
    if host.height == 0:
        raise TraceError(trace.path, "has no CPU ops or runtime calls to build a critical path from")
    return Window(label="whole trace", start=int(host["ts"].min()), end=int(host["end"].max()))


def step_windows(trace: Trace) -> list[Window]:
    """One window per profiler step; the whole trace when it has none."""
    if trace.steps.height == 0:
        return [whole_window(trace)]
    return [step_window(trace, int(s)) for s in trace.steps.sort("ts")["step"].to_list()]


def critical_path(trace: Trace, window: Window, facts: TraceFacts | None = None) -> CriticalPath:
    """The longest path of ``window``; ``facts`` shares whole-trace tables across windows."""
    graph = build_graph(trace, window.start, window.end, facts)
    if graph.events.height == 0:
        raise EmptyWindow(trace.path, f"has no CPU ops or runtime calls in {window.label}")
    nodes = longest_path(graph)
    path = _path_table(graph, nodes)
    first, last = (_node_ts(graph, nodes[0]), _node_ts(graph, nodes[-1])) if len(nodes) > 1 else (0, 0)
    if window.clip is not None and path.height:
        path = _clipped(path, *window.clip)
        first, last = max(first, window.clip[0]), min(last, window.clip[1])
    length = float(path["us"].sum()) if path.height else 0.0
    # The window the path's parts add up to: the model's step window where the path is cut to it,
    # else the host range reaching to its last activity's end when the GPU ran past it.
    lo, hi = window.clip if window.clip is not None else (window.start, max(window.end, int(graph.events["end"].max())))  # type: ignore[arg-type]
    if len(nodes) <= 1:
        first = last = lo
    span = max(last - first, 0) / 1000
    return CriticalPath(
        window=window,
        length_us=length,
        span_us=span,
        path=path,
        summary=summarize(path, length),
        nodes=graph.nodes,
        edges=graph.edges.height,
        notes=_clock_notes(trace),
        window_us=(hi - lo) / 1000,
        before_us=(first - lo) / 1000,
        after_us=(hi - last) / 1000,
    )


def _clipped(path: pl.DataFrame, start: int, end: int) -> pl.DataFrame:
    """The path's edges within ``[start, end]`` (ns), each cut to it: GPU work a step's ops
    queued runs into the next step, whose time it is (the steps' windows are disjoint)."""
    lo, hi = start / 1000, end / 1000
    cut_start = pl.max_horizontal("start_us", pl.lit(lo))
    cut_end = pl.min_horizontal(pl.col("start_us") + pl.col("us"), pl.lit(hi))
    inside = (pl.col("start_us") + pl.col("us") >= lo) & (pl.col("start_us") <= hi)
    cut = (pl.col("start_us") < lo) | (pl.col("start_us") + pl.col("us") > hi)
    # only an edge that crosses the window is recomputed: an absolute time in
    # float microseconds steps by 0.25 us, and every edge redone from two of
    # them would add that rounding to the path (6.4 us over 867 edges)
    return path.filter(inside).with_columns(
        us=pl.when(cut).then((cut_end - cut_start).clip(lower_bound=0.0)).otherwise(pl.col("us")), start_us=cut_start
    )


def _clock_notes(trace: Trace) -> list[str]:
    """The whole trace's clock check (:func:`kinetolens.analysis.trace_kind.clock_offset`),
    the same sentence for every step: a step's own activities cannot tell a
    queued stream from an offset clock."""
    offset = clock_offset(trace)
    return [offset.sentence()] if offset is not None else []


def _node_ts(graph: DependencyGraph, node: int) -> int:
    return int(graph.events["end" if node % 2 else "ts"][node // 2])


def longest_path(graph: DependencyGraph) -> list[int]:
    """Node ids along the heaviest path (weights in ns)."""
    e = graph.edges
    try:
        return chain_longest_path(e["src"].to_numpy(), e["dst"].to_numpy(), e["weight"].to_numpy(), graph.nodes)
    except CycleError:
        raise TraceError("trace", "has events whose order contradicts their dependencies (a cycle); timestamps may be skewed") from None


#: Edge type -> the bound its time counts as (a CPU edge in a DataLoader range is data
#: loading; a kernel edge is compute, memory or communication by its activity).
_TYPE_BOUND = {"dependency": "dependency", "sync": "sync_wait", "launch": "launch_overhead", "kernel_gap": "kernel_gap"}


def _path_table(graph: DependencyGraph, nodes: list[int]) -> pl.DataFrame:
    """The path's edges in order, with the event each one's time belongs to.

    Numpy over the edge arrays (a sorted key per edge, one binary search per
    step) and gathers by event id: a few dozen array operations whatever the
    path's length, where a join per column cost milliseconds on small windows."""
    if len(nodes) < 2:
        return pl.DataFrame(schema=_PATH_SCHEMA)
    e, ev = graph.edges, graph.events
    src, dst, weight = (e[c].to_numpy() for c in ("src", "dst", "weight"))
    n = np.asarray(nodes, dtype=np.int64)
    width = np.int64(graph.nodes + 1)
    key = src * width + dst
    # Parallel edges: the heaviest is the one the path length counted (the first in edge order among equals).
    by_key = np.lexsort((-weight, key))
    sorted_key = key[by_key]
    want = n[:-1] * width + n[1:]
    at = np.minimum(np.searchsorted(sorted_key, want), sorted_key.size - 1)
    found = sorted_key[at] == want
    chosen = by_key[at[found]]
    order = np.flatnonzero(found)
    p_src = src[chosen]
    s_eid = p_src // 2
    start = np.where(p_src % 2 == 1, ev["end"].to_numpy()[s_eid], ev["ts"].to_numpy()[s_eid])
    # Row gathers (no query) and one query for the columns the path shows.
    picked = e[pl.Series(chosen)]
    shown = ("name", "op", "module", "source", "kind", "data_loading", "ts", "side", "tid", "stream", *(["comm"] if "comm" in ev.columns else []))
    info = ev[picked["eid"]]
    frame = pl.concat(
        [
            pl.DataFrame([picked["type"], picked["eid"], *(info[c] for c in shown)]),
            pl.DataFrame({"order": order, "w": weight[chosen], "start_us": start / 1000}),
        ],
        how="horizontal",
    ).lazy()
    if "comm" not in ev.columns:
        frame = frame.with_columns(comm=pl.lit(None, pl.Boolean))
    where = pl.when(pl.col("side") == "cpu").then(pl.format("thread {}", pl.col("tid"))).otherwise(pl.format("stream {}", pl.col("stream")))
    t = pl.col("type")
    bound = (
        pl.when(t == "cpu")
        .then(pl.when(pl.col("data_loading").fill_null(False)).then(pl.lit("data_loading")).otherwise(pl.lit("cpu")))
        .when(t != "kernel")
        .then(t.replace_strict(_TYPE_BOUND, default=None, return_dtype=pl.String))
        .when(pl.col("comm").fill_null(False))
        .then(pl.lit("communication"))
        .when(pl.col("kind").is_in(["memcpy", "memset"]))
        .then(pl.lit("gpu_memory"))
        .otherwise(pl.lit("gpu_compute"))
    )
    return frame.select(
        "order", "type", bound_by=bound, us=pl.col("w") / 1000, name="name", op="op", module="module", source="source",
        where=where, ts_us=pl.col("ts") / 1000, start_us="start_us",
    ).cast(_PATH_SCHEMA).collect(engine="in-memory")  # fmt: skip


def summarize(path: pl.DataFrame, length_us: float) -> pl.DataFrame:
    """Time on the path per ``bound_by`` (us and % of the length), in :data:`BOUND_BY` order."""
    try:  # a cast, not a query: this is most of a small window's summary
        physical = path["bound_by"].cast(pl.Enum([*BOUND_BY, "dependency"])).to_physical().to_numpy()
        codes = np.where(np.isnan(physical), -1, physical).astype(np.int64) if physical.dtype.kind == "f" else physical.astype(np.int64)
        codes[codes >= len(BOUND_BY)] = -1
    except pl.exceptions.InvalidOperationError:  # a label of another table
        codes = path["bound_by"].replace_strict({b: i for i, b in enumerate(BOUND_BY)}, default=-1, return_dtype=pl.Int64).to_numpy()
    kept = codes >= 0
    us = np.bincount(codes[kept], weights=path["us"].to_numpy()[kept], minlength=len(BOUND_BY))
    count = np.bincount(codes[kept], minlength=len(BOUND_BY))
    have = np.flatnonzero(count)
    return pl.DataFrame(
        {
            "bound_by": [BOUND_BY[i] for i in have],
            "us": us[have],
            "pct": 100 * us[have] / length_us if length_us else np.zeros(have.size),
            "edges": count[have],
        },
        schema={"bound_by": pl.String, "us": pl.Float64, "pct": pl.Float64, "edges": pl.Int64},
    )


#: Bounds whose path edges are a GPU activity's own run time (a kernel, a copy, a collective).
ACTIVITY_BOUNDS = ("gpu_compute", "gpu_memory", "communication")


def top_items(path: pl.DataFrame, by: str, length_us: float, n: int = 10, bounds: tuple[str, ...] | None = None) -> pl.DataFrame:
    """The path's time per ``by`` value and bound, largest first (a kernel's
    own time and its launch delay are two rows); ``bounds``: only those
    (:data:`ACTIVITY_BOUNDS`: the kernels on the path)."""
    p = path.filter((pl.col("us") > 0) & pl.col(by).is_not_null())
    if bounds is not None:
        p = p.filter(pl.col("bound_by").is_in(list(bounds)))
    if p.height == 0:
        return pl.DataFrame(schema={by: pl.String, "bound_by": pl.String, "us": pl.Float64, "pct": pl.Float64})
    return (
        p.group_by(by, "bound_by")
        .agg(us=pl.col("us").sum())
        .sort("us", by, descending=[True, False])
        .head(n)
        .with_columns(pct=100 * pl.col("us") / length_us if length_us else pl.lit(0.0))
    )


def critical_paths(trace: Trace, windows: list[Window]) -> list[CriticalPath]:
    """The path of each window; windows without CPU ops (a step of annotations only) are left out."""
    facts = TraceFacts.of(trace)
    paths = []
    for w in windows:
        try:
            paths.append(critical_path(trace, w, facts))
        except EmptyWindow:
            if len(windows) == 1:
                raise
    if not paths:
        raise TraceError(trace.path, "has no CPU ops or runtime calls in any step")
    return paths


def per_window(paths: list[CriticalPath]) -> pl.DataFrame:
    """One row per window: its length, span, the window's time before and after the
    path (see :class:`CriticalPath`) and the bound that holds the most of it."""
    rows = []
    for cp in paths:
        top = cp.summary.sort("us", descending=True)
        rows.append(
            {
                "window": cp.window.label,
                "step": cp.window.step,
                "length_us": cp.length_us,
                "span_us": cp.span_us,
                "before_us": cp.before_us,
                "after_us": cp.after_us,
                "window_us": cp.window_us,
                "top_bound": top["bound_by"][0] if top.height else None,
                "top_pct": float(top["pct"][0]) if top.height else None,
            }
        )
    return pl.DataFrame(
        rows,
        schema={"window": pl.String, "step": pl.Int64, "length_us": pl.Float64, "span_us": pl.Float64, "before_us": pl.Float64, "after_us": pl.Float64, "window_us": pl.Float64,
                "top_bound": pl.String, "top_pct": pl.Float64},
    )


def window_bounds(paths: list[CriticalPath]) -> pl.DataFrame:
    """One row per window and bound: ``window``, ``step``, ``bound_by``, ``us``, ``pct``
    (of that window's length), in :data:`BOUND_BY` order."""
    schema = {"window": pl.String, "step": pl.Int64, "bound_by": pl.String, "us": pl.Float64, "pct": pl.Float64}
    frames = [
        cp.summary.select(
            pl.lit(cp.window.label, pl.String).alias("window"), pl.lit(cp.window.step, pl.Int64).alias("step"), "bound_by", "us", "pct"
        )
        for cp in paths
    ]
    return pl.concat(frames).cast(schema) if frames else pl.DataFrame(schema=schema)  # type: ignore[arg-type]


def combined(paths: list[CriticalPath]) -> tuple[pl.DataFrame, float]:
    """All windows' path edges together, and their total length (us)."""
    path = pl.concat([cp.path for cp in paths]) if paths else pl.DataFrame(schema=_PATH_SCHEMA)
    return path, sum(cp.length_us for cp in paths)
