"""The dependency graph of one window of a trace: what had to finish before what.

Nodes are the starts and ends of events (node ``2 * eid`` starts event
``eid``, ``2 * eid + 1`` ends it).  Edges are typed, weighted in
nanoseconds, and built as polars tables (no Python loop per event):

* ``cpu``: a stretch of one CPU thread between two consecutive op or runtime
  call boundaries, nested ops included (``A.start -> B.start -> B.end ->
  A.end``), attributed to the innermost op open in it.  The last stretch of a
  blocking call (device, stream or event synchronization, a synchronous
  copy) weighs 0: that wait is the GPU work it waits for, reached through a
  ``sync`` edge.
* ``dependency``: a forward op -> its backward op on another thread (the
  autograd engine's), and one top-level op to the next on a thread, weight 0.  What
  the thread did between two ops is not traced, so it is not counted (it is
  the difference between a path's span and its length).
* ``launch``: runtime call start -> kernel start, weighing the launch delay
  when the stream was empty at the launch, else 0 (the kernel waited for the
  stream, not for the launch).  Kernels a CUDA/HIP graph launch releases all
  hang off that launch.
* ``kernel``: a kernel, memcpy or memset (start -> end, its duration).
* ``kernel_gap``: the previous activity on the stream -> this one, the gap
  between them, where the kernel was queued behind it.
* ``sync``: GPU -> CPU (the last activity on the synchronized stream(s) ->
  the end of ``cudaDeviceSynchronize`` / ``cudaStreamSynchronize`` /
  ``cudaEventSynchronize``) and GPU -> GPU (the activity before a
  ``cudaEventRecord`` -> the first activity after a ``cudaStreamWaitEvent``
  on the waiting stream), weight 0.

This is the model of HTA's critical path analysis (``CPGraph``), so that
lengths compare; the differences are on purpose: kernels released by a graph
launch are linked to it, a DataLoader ``__next__`` range is a node (its time
is data loading, not a gap), and memcpy/memset are told apart from compute.
The trace does not name the CUDA event a wait or an event sync is on, so
it is taken as the last ``cudaEventRecord`` before it on the same thread,
and the recorded work as the last launch before that record.  Traces
without ``cuda_sync`` records (and often without ``cudaEventRecord`` calls)
name neither the event nor the streams of a ``cudaStreamWaitEvent``: its
wait is taken from the next launch of its thread back to the last activity
launched before it on another stream, where the launched activity did start
after that one ended (:meth:`_FactsIndex.inferred_stream_waits`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

import numpy as np
import numpy.ma  # noqa: F401  (polars imports it on the first numpy -> polars conversion: at import, not in the first graph)
import polars as pl

from kinetolens.analysis.session import session_of
from kinetolens.model.trace import Trace
from kinetolens.model.vocabulary import (
    BLOCKING_CALLS,
    DEVICE_SYNC_CALLS,
    GPU_ACTIVITY,
    STREAM_SYNC_CALLS,
    STREAM_WAIT_CALLS,
    is_comm_kernel,
    is_dataloader,
)

EVENT_RECORD_CALLS = ("cudaEventRecord", "hipEventRecord", "cudaEventRecordWithFlags", "hipEventRecordWithFlags")

#: Host events (ops and runtime calls) up to which the whole trace's candidate events are made at once.
_SMALL_TRACE = 20_000

#: Stands for a null time in the edge arrays: before everything.
_LOW = -(2**63)

EDGE_TYPES = ("cpu", "dependency", "launch", "kernel", "kernel_gap", "sync")

_EDGE_SCHEMA = {"src": pl.Int64, "dst": pl.Int64, "weight": pl.Int64, "type": pl.String, "eid": pl.Int64}


@dataclass
class DependencyGraph:
    """``events``: one row per node pair (``eid``, ``side`` cpu/gpu, ``kind``,
    ``name``, ``op``, ``module``, ``source``, ``pid``/``tid`` or
    ``device``/``stream``, ``ts``/``end`` ns, ``data_loading``, ``comm``);
    ``edges``: ``src``, ``dst`` (node ids), ``weight`` (ns), ``type``, ``eid``
    (the event the edge's time belongs to, null for dependency/sync)."""

    events: pl.DataFrame
    edges: pl.DataFrame
    start: int
    end: int

    @property
    def nodes(self) -> int:
        return 2 * self.events.height



#: The kernel columns :func:`_gpu_events` and :class:`_Candidates` read.
_ACTIVITY_COLUMNS = ("kind", "device", "stream", "ts", "dur", "op_id", "launch_id", "kernel_id")
#: The kernels' texts a graph's GPU events show, looked up for the events a
#: window holds (``TraceFacts.activity`` is kept for the trace's life).
_KERNEL_TEXTS = ["name", "op", "module", "source"]


_Held = TypeVar("_Held")


def _alive(ref: weakref.ref[_Held], what: str) -> _Held:
    """What a weak reference holds; a ReferenceError naming ``what`` once it was collected."""
    held = ref()
    if held is None:
        raise ReferenceError(f"{what} was collected")
    return held


class TraceFacts:
    """The whole-trace tables every window's graph reads, computed once per trace.

    It holds its trace weakly: the trace's analysis session keeps it
    (:meth:`of`), and a session's results must not keep their trace alive.
    """

    def __init__(self, trace: Trace) -> None:
        self._trace = weakref.ref(trace)

    @property
    def trace(self) -> Trace:
        return _alive(self._trace, "the trace of these dependency facts")

    @classmethod
    def of(cls, trace: Trace) -> TraceFacts:
        """The facts of ``trace``, kept in its analysis session: the next window's graph reuses them."""
        return session_of(trace).get(cls, trace)

    def __reduce__(self) -> tuple[type, tuple[Trace]]:
        """Pickled as its trace alone (a pickled trace stays lean; the tables are made again)."""
        return (type(self), (self.trace,))

    @cached_property
    def activity(self) -> pl.DataFrame:
        """GPU activity with ``busy_until``: the end of every earlier activity on its stream.

        Only the numbers a window's graph reads, and whether it is
        communication: the session keeps this for the trace's life, and the
        kernel table sorted again with its texts was a second copy of it
        (a window's kernels take their texts by ``kernel_row``)."""
        k = self.trace.kernels
        return (
            k.lazy()
            .select(*_ACTIVITY_COLUMNS, comm=is_comm_kernel(k))
            .with_row_index("kernel_row")
            .filter(pl.col("kind").cast(pl.String).is_in(GPU_ACTIVITY) & (pl.col("dur") >= 0))
            .sort("ts")
            .with_columns(busy_until=(pl.col("ts") + pl.col("dur")).cum_max().shift(1).over("device", "stream"))
            .collect(engine="in-memory")
        )

    @cached_property
    def launches(self) -> pl.DataFrame:
        """Runtime calls that launched GPU activity: thread, start, and the stream and first activity launched."""
        k = self.trace.kernels.lazy().filter(pl.col("launch_id").is_not_null()).group_by("launch_id").agg(
            pl.col("kernel_id").sort_by("ts").first(), pl.col("stream").sort_by("ts").first(), pl.col("device").sort_by("ts").first()
        )
        rt = self.trace.runtime.lazy().select("launch_id", "pid", "tid", "ts")
        return rt.join(k, on="launch_id", how="inner").sort("ts").collect(engine="in-memory")

    @cached_property
    def records(self) -> pl.DataFrame:
        rt = self.trace.runtime.lazy()
        return rt.filter(pl.col("name").is_in(EVENT_RECORD_CALLS)).select("pid", "tid", record_ts="ts").sort("record_ts").collect(engine="in-memory")

    @cached_property
    def calls(self) -> pl.DataFrame:
        rt = self.trace.runtime.lazy().filter(pl.col("kind").cast(pl.String) == "runtime")
        return rt.select("launch_id", "correlation", "pid", "tid", "ts").collect(engine="in-memory")

    @cached_property
    def sync(self) -> pl.DataFrame:
        return self.trace.runtime.filter(pl.col("kind").cast(pl.String) == "sync")

    @cached_property
    def loaders(self) -> pl.DataFrame:
        """DataLoader ``__next__`` ranges (ops in older traces, annotations in newer ones)."""
        return self.trace.ops.filter(is_dataloader(pl.col("name")))

    @cached_property
    def _ops_by_row(self) -> bool:
        ids = self.trace.ops["op_id"]
        return bool((ids == pl.int_range(0, ids.len(), eager=True)).all())

    def op_name_expr(self) -> pl.Expr:
        """The name of each row's ``op_id`` op, as an expression over a runtime-call frame."""
        if self._ops_by_row:
            return pl.lit(self.trace.ops["name"]).gather(pl.col("op_id"))
        return pl.col("op_id").replace_strict(self.trace.ops["op_id"], self.trace.ops["name"], default=None, return_dtype=pl.String)

    def kernel_texts(self) -> dict[str, pl.Expr]:
        """The kernels' texts (:data:`_KERNEL_TEXTS`), as expressions over a
        frame of :attr:`activity` rows: gathered from the kernel table by
        row (``kernel_row``), not kept with the activity."""
        kernels = self.trace.kernels
        return {c: pl.lit(kernels[c]).gather(pl.col("kernel_row")) for c in _KERNEL_TEXTS}

    def op_names(self, op_ids: pl.Series) -> pl.Series:
        """The names of ops by id (ids are row numbers in the model: a gather, not a join)."""
        if self._ops_by_row:
            return self.trace.ops["name"].gather(op_ids).alias("op")
        names = self.trace.ops.select("op_id", op="name")
        return op_ids.to_frame("op_id").join(names, on="op_id", how="left", maintain_order="left")["op"]


def build_graph(trace: Trace, start: int, end: int, facts: TraceFacts | None = None) -> DependencyGraph:
    """The graph of the CPU ops and runtime calls that start in ``[start, end]``
    (ns, with a duration) and of the GPU activity they launched.  Pass the
    same ``facts`` for many windows of one trace.

    The window's events are rows picked with numpy from whole-trace tables
    made once per trace, and the edges are built on their columns as numpy
    arrays: a polars query costs tens of microseconds even on ten rows (and
    building its expressions as much again), which made the fixed cost of a
    small window milliseconds."""
    facts = facts if facts is not None and facts.trace is trace else TraceFacts.of(trace)
    cand = _facts_index(facts).candidates_for(start, end)
    cpu_rows = np.flatnonzero((cand.cpu_ts >= start) & (cand.cpu_ts <= end))
    launched = cand.cpu_launch[cpu_rows]
    gpu_rows = np.flatnonzero(np.isin(cand.gpu_launch, launched[launched >= 0])) if cand.gpu_launch.size else cpu_rows[:0]
    events = pl.concat([cand.cpu[cpu_rows], cand.gpu[gpu_rows]], how="vertical")
    events.insert_column(0, pl.Series("eid", np.arange(events.height, dtype=np.int64)))
    cols = _Columns.pick(cand, cpu_rows, gpu_rows)
    wait_src, wait_end, wait_dst = _stream_waits(facts, cols)
    parts = [
        _cpu_edges(cols),
        _gpu_edges(cols, wait_dst, wait_end),
        _sync_edges(facts, cols),
        _backward_edges(cols),
        _Edges(2 * wait_src + 1, 2 * wait_dst, np.zeros(wait_src.size, dtype=np.int64), EDGE_TYPES.index("sync"), -1),
    ]
    return DependencyGraph(events=events, edges=_Edges.table(parts), start=start, end=end)


class _Candidates:
    """Every event a window may hold, as one table with the graph's event
    columns (CPU ops and runtime calls with a duration, then the GPU activity
    runtime calls launched) and its numbers as numpy arrays: a window is rows
    picked from it.  Whether a CPU event is data loading, the end of earlier
    activity on a stream and a launch's start do not depend on the window."""

    def __init__(self, facts: TraceFacts, start: int = _LOW, end: int = 2**63 - 1) -> None:
        cpu = _cpu_events(facts, start, end)
        gpu = _gpu_events(facts, cpu)
        numbers = {f"_n_{c}": e for c, e in _Columns.exprs().items()}
        both = pl.concat([cpu, gpu], how="diagonal_relaxed").with_columns(**numbers).collect(engine="in-memory")
        arrays = {c.removeprefix("_n_"): both[c].to_numpy() for c in numbers}
        both = both.drop(*numbers)
        self.n_cpu = int(arrays["cpu"].sum())
        # In the order of ``facts.activity`` (by start), as a window's join keeps it.
        at = facts.activity["kernel_id"].to_numpy()
        by_id = np.argsort(at, kind="stable")
        kernel = arrays["kernel_id"][self.n_cpu :]
        rank = by_id[np.searchsorted(at[by_id], kernel)] if kernel.size else kernel
        order = np.concatenate([np.arange(self.n_cpu), self.n_cpu + np.argsort(rank, kind="stable")])
        both = both[order]
        self.cpu, self.gpu = both[: self.n_cpu], both[self.n_cpu :]
        self.columns = _Columns(self.n_cpu, {c: v[order] for c, v in arrays.items()})
        self.cpu_ts = self.columns.cpu("ts")
        self.cpu_launch = self.columns.cpu("launch_id")
        self.gpu_launch = self.columns.gpu("launch_id")


class _Columns:
    """The events' numbers as numpy arrays: ids -1 where null, flags False;
    CPU events are the first ``n_cpu`` rows."""

    def __init__(self, n_cpu: int, arrays: dict[str, np.ndarray]) -> None:
        self.n_cpu = n_cpu
        self._all = arrays

    @staticmethod
    def exprs() -> dict[str, pl.Expr]:
        """The arrays, as expressions over the events' columns."""
        ids = ("pid", "tid", "ts", "end", "op_id", "launch_id", "fwd_op_id", "device", "stream", "kernel_id", "launch_ts")
        return {
            **{c: pl.col(c).fill_null(-1) for c in ids},
            "busy_until": pl.col("busy_until").fill_null(_LOW),
            "blocking": pl.col("blocking").fill_null(False),
            "runtime": (pl.col("kind") == "runtime").fill_null(False),
            "is_op": (pl.col("kind") == "op").fill_null(False),
            "sync_call": pl.col("name").is_in([*DEVICE_SYNC_CALLS, *STREAM_SYNC_CALLS]).fill_null(False),
            "cpu": (pl.col("side") == "cpu").fill_null(False),
        }

    @classmethod
    def pick(cls, cand: _Candidates, cpu_rows: np.ndarray, gpu_rows: np.ndarray) -> _Columns:
        """The columns of a window's events, picked from the whole trace's (no query)."""
        rows = np.concatenate([cpu_rows, cand.n_cpu + gpu_rows])
        arrays = {c: v[rows] for c, v in cand.columns._all.items()}
        arrays["eid"] = np.arange(rows.size, dtype=np.int64)
        return cls(cpu_rows.size, arrays)

    def cpu(self, name: str) -> np.ndarray:
        return self._all[name][: self.n_cpu]

    def gpu(self, name: str) -> np.ndarray:
        return self._all[name][self.n_cpu :]


class _Edges:
    """Edges as numpy arrays (``eid`` -1 where the edge's time belongs to no event),
    made into the graph's one polars table at the end: building each part as a
    polars query cost a few milliseconds of fixed overhead per window."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, type_: np.ndarray | int, eid: np.ndarray | int) -> None:
        n = src.size
        self.src, self.dst, self.weight = src.astype(np.int64), dst.astype(np.int64), weight.astype(np.int64)
        self.type = np.broadcast_to(np.asarray(type_, dtype=np.int8), n)
        self.eid = np.broadcast_to(np.asarray(eid, dtype=np.int64), n)

    @classmethod
    def linking(cls, frame: pl.DataFrame, type_: str) -> _Edges:
        """Zero-weight edges of one type (``src``, ``dst`` columns) that belong to no event."""
        src, dst = frame["src"].to_numpy(), frame["dst"].to_numpy()
        return cls(src, dst, np.zeros(src.size, dtype=np.int64), EDGE_TYPES.index(type_), -1)

    @classmethod
    def none(cls) -> _Edges:
        empty = np.zeros(0, dtype=np.int64)
        return cls(empty, empty, empty, 0, -1)

    @classmethod
    def concat(cls, parts: list[_Edges]) -> _Edges:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("src", "dst", "weight", "type", "eid")))

    @staticmethod
    def table(parts: list[_Edges]) -> pl.DataFrame:
        parts = [p for p in parts if p.src.size]
        if not parts:
            return pl.DataFrame(schema=_EDGE_SCHEMA)
        frame = pl.DataFrame(
            {
                "src": np.concatenate([p.src for p in parts]),
                "dst": np.concatenate([p.dst for p in parts]),
                "weight": np.maximum(np.concatenate([p.weight for p in parts]), 0),
                "t": np.concatenate([p.type for p in parts]),
                "eid": np.concatenate([p.eid for p in parts]),
            }
        )
        return frame.select(
            "src", "dst", "weight",
            type=pl.col("t").replace_strict(dict(enumerate(EDGE_TYPES)), return_dtype=pl.String),
            eid=pl.when(pl.col("eid") >= 0).then(pl.col("eid")),
        ).cast(_EDGE_SCHEMA)  # fmt: skip


def _unique_rows(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)``:
    the distinct rows in order (first column first) and each row's place
    among them, by one lexsort (numpy's row-wise unique sorts a structured
    view of the rows, 5x slower on a step's events)."""
    n = columns[0].size
    if n == 0:
        return np.stack(columns, axis=1), np.zeros(0, dtype=np.int64)
    order = np.lexsort(columns[::-1])
    ordered = [c[order] for c in columns]
    new = _groups(*ordered)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return np.stack([c[new] for c in ordered], axis=1), inverse


def _groups(*keys: np.ndarray) -> np.ndarray:
    """True where a row starts a new run of equal ``keys`` (rows sorted by them)."""
    n = keys[0].size
    new = np.ones(n, dtype=bool)
    if n > 1:
        same = np.ones(n - 1, dtype=bool)
        for k in keys:
            same &= k[1:] == k[:-1]
        new[1:] = ~same
    return new


def _cpu_events(facts: TraceFacts, start: int, end: int) -> pl.LazyFrame:
    trace = facts.trace
    in_window = pl.col("ts").is_between(start, end) & (pl.col("dur") > 0)
    kind = pl.col("kind").cast(pl.String)
    blocking = pl.col("name").is_in(sorted(BLOCKING_CALLS))
    # Older traces write the DataLoader's range as an op, newer ones as an annotation.
    ops_in = trace.ops.lazy().filter(in_window & ((kind == "op") | is_dataloader(pl.col("name"))))
    rt = trace.runtime.lazy().filter(in_window & (kind == "runtime"))
    frames = [
        ops_in.select(
            side=pl.lit("cpu"),
            kind=kind,
            name="name",
            op="name",
            module="module",
            source="source",
            pid="pid",
            tid="tid",
            ts="ts",
            end="end",
            op_id="op_id",
            launch_id=pl.lit(None, pl.Int64),
            fwd_op_id="fwd_op_id",
            blocking=blocking,
        ),
        rt.select(
            side=pl.lit("cpu"),
            kind=pl.lit("runtime"),
            name="name",
            op=facts.op_name_expr(),
            module="module",
            source="source",
            pid="pid",
            tid="tid",
            ts="ts",
            end="end",
            op_id="op_id",
            launch_id="launch_id",
            fwd_op_id=pl.lit(None, pl.Int64),
            blocking=blocking,
        ),
    ]
    cpu = pl.concat(frames, how="vertical_relaxed")
    return _mark_data_loading(cpu, facts.loaders)


def _mark_data_loading(cpu: pl.LazyFrame, loaders: pl.DataFrame) -> pl.LazyFrame:
    """CPU events inside a DataLoader ``__next__`` range on their thread."""
    if loaders.height == 0:
        return cpu.with_columns(data_loading=pl.lit(False))
    dl = loaders.lazy().select("pid", "tid", dl_ts="ts", dl_end="end").sort("dl_ts")
    marked = (
        cpu.with_row_index("_row")
        .sort("ts")
        .join_asof(dl, left_on="ts", right_on="dl_ts", by=["pid", "tid"], strategy="backward", check_sortedness=False)
        .with_columns(data_loading=pl.col("dl_end").is_not_null() & (pl.col("end") <= pl.col("dl_end")))
        .sort("_row")
    )
    return marked.drop("_row", "dl_ts", "dl_end")


def _gpu_events(facts: TraceFacts, cpu: pl.LazyFrame) -> pl.LazyFrame:
    """The activity launched by the window's runtime calls, with the end of
    every earlier activity on its stream (whole trace): the stream was empty
    at the launch when that is before the launch."""
    launches = cpu.filter(pl.col("launch_id").is_not_null()).select("launch_id", launch_ts="ts")
    k = facts.activity.lazy().join(launches, on="launch_id", how="inner")
    return k.select(
        side=pl.lit("gpu"),
        kind=pl.col("kind").cast(pl.String),
        **facts.kernel_texts(),
        device="device",
        stream="stream",
        ts="ts",
        end=pl.col("ts") + pl.col("dur"),
        op_id="op_id",
        launch_id="launch_id",
        kernel_id="kernel_id",
        launch_ts="launch_ts",
        busy_until="busy_until",
        comm="comm",
    )


def _cpu_edges(cols: _Columns) -> _Edges:
    """Consecutive boundaries of each thread's nested ops, in call order.

    Ties sort so that nesting holds: at one time, ends before starts, the
    longer range starts first and the later-started range ends first.
    """
    n = cols.n_cpu
    if n == 0:
        return _Edges.none()
    eid, pid, tid, ts, end, blocking = (cols.cpu(c) for c in ("eid", "pid", "tid", "ts", "end", "blocking"))
    one, zero = np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    t = np.concatenate([ts, end])
    is_start = np.concatenate([one, zero])
    order = np.lexsort((np.concatenate([eid, -eid]), np.concatenate([ts - end, -ts]), is_start, t, np.concatenate([tid, tid]), np.concatenate([pid, pid])))
    t, start, e = t[order], is_start[order], np.concatenate([eid, eid])[order]
    block = np.concatenate([blocking, blocking])[order]
    new = _groups(np.concatenate([pid, pid])[order], np.concatenate([tid, tid])[order])
    step = 2 * start - 1
    total = np.cumsum(step)
    first = np.maximum.accumulate(np.where(new, np.arange(2 * n), 0))
    depth = total - total[first] + step[first]
    node = 2 * e + 1 - start
    at = np.flatnonzero(~new)  # every boundary but a thread's first: an edge from the one before
    prev = at - 1
    # After an end, the innermost open range is the last one opened to that depth
    # (the thread's first boundary included: it opens the first top-level op).
    group = np.cumsum(new) - 1
    lo = int(depth.min())
    span = np.int64(int(depth.max()) - lo + 1)
    opened = np.flatnonzero(start == 1)
    key = (group[opened] * span + (depth[opened] - lo)) * np.int64(2 * n + 1) + opened
    by = np.argsort(key, kind="stable")
    ask = (group[prev] * span + (depth[prev] - lo)) * np.int64(2 * n + 1) + prev
    hit = np.searchsorted(key[by], ask, side="right") - 1
    found = (hit >= 0) & ((key[by][np.maximum(hit, 0)] // np.int64(2 * n + 1)) == (ask // np.int64(2 * n + 1)))
    parent = np.where(found, e[opened[by][np.maximum(hit, 0)]], -1)
    s_now, s_prev = start[at], start[prev]
    top = (s_now == 1) & (depth[at] == 1)
    weight = np.where(top | ((s_now == 0) & block[at]), 0, t[at] - t[prev])
    kind = np.where(top, EDGE_TYPES.index("dependency"), EDGE_TYPES.index("cpu"))
    owner = np.where(top, -1, np.where(s_prev == 1, e[prev], np.where(s_now == 0, e[at], parent)))
    return _Edges(node[prev], node[at], weight, kind, owner)


def _backward_edges(cols: _Columns) -> _Edges:
    """A backward op on another thread (the autograd engine's) starts after its forward op ends."""
    op_id, fwd_op_id = cols.cpu("op_id"), cols.cpu("fwd_op_id")
    bwd = np.flatnonzero(fwd_op_id >= 0)
    fwd = np.flatnonzero(cols.cpu("is_op") & (op_id >= 0))
    if bwd.size == 0 or fwd.size == 0:
        return _Edges.none()
    fwd = fwd[np.argsort(op_id[fwd], kind="stable")]
    want = fwd_op_id[bwd]
    f = fwd[np.minimum(np.searchsorted(op_id[fwd], want), fwd.size - 1)]
    eid, pid, tid, ts, end = (cols.cpu(c) for c in ("eid", "pid", "tid", "ts", "end"))
    ok = (op_id[f] == want) & ((pid[f] != pid[bwd]) | (tid[f] != tid[bwd])) & (end[f] <= ts[bwd])
    return _Edges(2 * eid[f[ok]] + 1, 2 * eid[bwd[ok]], np.zeros(int(ok.sum()), dtype=np.int64), EDGE_TYPES.index("dependency"), -1)


def _gpu_edges(cols: _Columns, wait_dst: np.ndarray, wait_end: np.ndarray) -> _Edges:
    """Each activity's run, its launch (weighing the delay where the stream was
    empty) and the gap behind the activity before it on its stream."""
    n = cols._all["eid"].size - cols.n_cpu
    if n == 0:
        return _Edges.none()
    eid, launch_id, ts, end, launch_ts, busy, device, stream = (
        cols.gpu(c) for c in ("eid", "launch_id", "ts", "end", "launch_ts", "busy_until", "device", "stream")
    )
    # The runtime call that launched each activity (launch ids are unique per call).
    c_id, c_eid = cols.cpu("launch_id"), cols.cpu("eid")
    has = c_id >= 0
    c_id, c_eid = c_id[has], c_eid[has]
    by_id = np.argsort(c_id, kind="stable")
    at = np.minimum(np.searchsorted(c_id[by_id], launch_id), max(c_id.size - 1, 0))
    rt_eid = np.where(c_id[by_id][at] == launch_id, c_eid[by_id][at], -1) if c_id.size else np.full(n, -1)
    # A cudaStreamWaitEvent holds the activity until the recorded one ended.
    sync_end = np.full(n, _LOW, dtype=np.int64)
    if wait_dst.size:
        np.maximum.at(sync_end, wait_dst - int(eid[0]), wait_end)
    order = np.lexsort((eid, ts))
    on_stream = order[np.lexsort((np.arange(n), stream[order], device[order]))]
    new = _groups(device[on_stream], stream[on_stream])
    prev = np.full(n, -1, dtype=np.int64)
    prev[on_stream[1:]] = np.where(new[1:], -1, on_stream[:-1])
    launched = (busy < launch_ts) & (sync_end < launch_ts)
    # The latest end of the activities before each one on its stream: work
    # that starts before it (kernels overlapping on one stream, as
    # programmatic dependent launch lets them) shares that time with the
    # work before, so its own run on a path is only the part after it.
    prev_end = np.full(n, 0, dtype=np.int64)
    sorted_end = end[on_stream]
    firsts = np.flatnonzero(new) if n else np.zeros(0, dtype=np.int64)
    for a, b in zip(firsts, [*firsts[1:], n], strict=True):
        running = np.maximum.accumulate(sorted_end[a:b])
        prev_end[on_stream[a + 1 : b]] = running[:-1]
    prev_end = np.where(prev >= 0, prev_end, 0)
    queued = ~launched & (prev >= 0) & (sync_end < prev_end)
    own_start = np.where(prev >= 0, np.clip(prev_end, ts, end), ts)
    o = order
    run = _Edges(2 * eid[o], 2 * eid[o] + 1, end[o] - own_start[o], EDGE_TYPES.index("kernel"), eid[o])
    lo = o[rt_eid[o] >= 0]
    launch = _Edges(2 * rt_eid[lo], 2 * eid[lo], np.where(launched[lo], ts[lo] - launch_ts[lo], 0), EDGE_TYPES.index("launch"), eid[lo])
    q = o[queued[o]]
    gap = _Edges(2 * eid[prev[q]] + 1, 2 * eid[q], np.maximum(ts[q] - prev_end[q], 0), EDGE_TYPES.index("kernel_gap"), eid[prev[q]])
    return _Edges.concat([run, launch, gap])


class _ByGroup:
    """A table's rows sorted by group keys, then time: as-of lookups with one
    binary search per group (threads, streams: a handful), none per row."""

    def __init__(self, keys: list[np.ndarray], t: np.ndarray) -> None:
        self.order = np.lexsort((t, *reversed(keys))) if t.size else np.zeros(0, dtype=np.int64)
        self.t = t[self.order]
        by = [k[self.order] for k in keys]
        starts = np.flatnonzero(_groups(*by)) if t.size else np.zeros(0, dtype=np.int64)
        ends = np.append(starts[1:], t.size)
        self.spans = {tuple(int(k[i]) for k in by): (int(i), int(j)) for i, j in zip(starts, ends)}

    def find(self, keys: list[np.ndarray], t: np.ndarray, *, before: bool, strict: bool) -> np.ndarray:
        """For each query, the row of the last entry of its group at or before ``t``
        (``before``; strictly before if ``strict``) or the first at or after it; -1 where none."""
        out = np.full(t.size, -1, dtype=np.int64)
        if t.size == 0 or not self.spans:
            return out
        groups, inverse = _unique_rows(*keys)
        for g, group in enumerate(groups):
            span = self.spans.get(tuple(int(v) for v in group))
            if span is None:
                continue
            lo, hi = span
            rows = np.flatnonzero(inverse == g)
            if before:
                i = np.searchsorted(self.t[lo:hi], t[rows], side="left" if strict else "right") - 1
                ok = i >= 0
            else:
                i = np.searchsorted(self.t[lo:hi], t[rows], side="right" if strict else "left")
                ok = i < hi - lo
            out[rows[ok]] = self.order[lo + i[ok]]
        return out


def _matches(sorted_keys: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (query, position) pair whose key is equal (an inner join on sorted keys)."""
    lo = np.searchsorted(sorted_keys, queries, side="left")
    count = np.searchsorted(sorted_keys, queries, side="right") - lo
    total = int(count.sum())
    query = np.repeat(np.arange(queries.size), count)
    return query, np.arange(total) - np.repeat(np.cumsum(count) - count, count) + np.repeat(lo, count)


def _facts_index(facts: TraceFacts) -> _FactsIndex:
    index = facts.__dict__.get("_index")
    if index is None:
        index = facts.__dict__["_index"] = _FactsIndex(facts)
    return index


class _FactsIndex:
    """Whole-trace lookups the synchronization edges need, as arrays (once per trace).

    Kept in its facts, which it holds weakly: a cycle between the two would
    outlive a window's trace until the collector's next full pass, holding
    that window's tables (a trace read a step window at a time would grow
    by a window each step)."""

    def __init__(self, facts: TraceFacts) -> None:
        self._facts = weakref.ref(facts)

    @property
    def facts(self) -> TraceFacts:
        return _alive(self._facts, "the dependency facts of this index")

    @cached_property
    def candidates(self) -> _Candidates:
        return _Candidates(self.facts)

    def _host_events_in(self, start: int, end: int) -> tuple[int, int]:
        """How many ops and runtime calls start in ``[start, end]``, and how many there are."""
        trace = self.facts.trace
        inside = total = 0
        for table in (trace.ops, trace.runtime):
            ts = table["ts"].to_numpy()  # no copy: a start time is never null
            inside += int(np.count_nonzero((ts >= start) & (ts <= end)))
            total += ts.size
        return inside, total

    def candidates_for(self, start: int, end: int) -> _Candidates:
        """The whole trace's candidates when made already, when the trace is small
        (a query costs the same on it as on a window) or when the window holds a
        quarter of it: the next windows reuse them.  Else only the window's: a
        step of a long trace does not pay for the whole trace."""
        if "candidates" in self.__dict__:
            return self.candidates
        inside, total = self._host_events_in(start, end)
        if total <= _SMALL_TRACE or 4 * inside >= total:
            return self.candidates
        return _Candidates(self.facts, start, end)

    @cached_property
    def runtime(self) -> dict[str, np.ndarray]:
        """The runtime table's numbers the synchronization lookups need, in one
        query (ids -1 where null): ``kind`` 0 a runtime call, 1 a ``cuda_sync``
        record, 2 else; ``sync_kind`` (context, stream, event sync, other);
        ``record`` (an event record call) and ``wait`` (a stream wait record)."""
        kinds = {"Context Sync": 0, "Stream Sync": 1, "Event Sync": 2}
        kind = pl.col("kind").cast(pl.String)
        r = self.facts.trace.runtime.select(
            kind=pl.when(kind == "runtime").then(0).when(kind == "sync").then(1).otherwise(2).cast(pl.Int8),
            sync_kind=pl.col("name").replace_strict(kinds, default=3, return_dtype=pl.Int8),
            record=pl.col("name").is_in(EVENT_RECORD_CALLS).fill_null(False),
            wait=(pl.col("name") == "Stream Wait Event").fill_null(False),
            wait_call=((kind == "runtime") & pl.col("name").is_in(STREAM_WAIT_CALLS)).fill_null(False),
            **{c: pl.col(c).fill_null(-1) for c in ("pid", "tid", "ts", "end", "launch_id", "correlation")},
        )
        return {c: r[c].to_numpy() for c in r.columns}

    @cached_property
    def has_sync(self) -> bool:
        """Whether the trace has ``cuda_sync`` records (newer Kineto traces)."""
        return bool((self.runtime["kind"] == 1).any())

    def _sync_by_call(self, sync: np.ndarray, calls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(call row, sync row) of the runtime table for every ``cuda_sync`` record
        among ``sync`` with the correlation of a call among ``calls``."""
        corr = self.runtime["correlation"]
        sync = sync[corr[sync] >= 0]
        by = sync[np.argsort(corr[sync], kind="stable")]
        call, at = _matches(corr[by], np.where(corr[calls] >= 0, corr[calls], _LOW))
        return calls[call], by[at]

    @cached_property
    def records(self) -> tuple[_ByGroup, np.ndarray]:
        rt = self.runtime
        rows = np.flatnonzero(rt["record"])
        rows = rows[np.argsort(rt["ts"][rows], kind="stable")]
        t = rt["ts"][rows]
        return _ByGroup([rt["pid"][rows], rt["tid"][rows]], t), t

    @cached_property
    def launch_table(self) -> dict[str, np.ndarray]:
        """Every launching runtime call by start (``pid``, ``tid``, ``ts``) with the first
        activity (by start) it launched: its ``stream``, ``device``, ``kernel`` id, ``start``, ``end``."""
        # ``TraceFacts.launches`` on numpy: the first activity of each launch id, joined to its call.
        k = self.facts.trace.kernels.select(pl.col("launch_id", "stream", "device").fill_null(-1), "kernel_id", "ts", end=pl.col("ts") + pl.col("dur"))
        k_launch, k_ts = k["launch_id"].to_numpy(), k["ts"].to_numpy()
        rows = np.flatnonzero(k_launch >= 0)
        rows = rows[np.lexsort((k_ts[rows], k_launch[rows]))]
        rows = rows[_groups(k_launch[rows])]
        rt = self.runtime
        calls = np.flatnonzero(rt["launch_id"] >= 0)
        call, at = _matches(k_launch[rows], rt["launch_id"][calls])
        call, first = calls[call], rows[at]
        by_ts = np.argsort(rt["ts"][call], kind="stable")
        call, first = call[by_ts], first[by_ts]
        out = {c: rt[c][call] for c in ("pid", "tid", "ts")}
        out.update(stream=k["stream"].to_numpy()[first], device=k["device"].to_numpy()[first], kernel=k["kernel_id"].to_numpy()[first])
        out.update(start=k_ts[first], end=k["end"].to_numpy()[first])
        return out

    @cached_property
    def launches(self) -> tuple[_ByGroup, _ByGroup, np.ndarray]:
        """By thread, by thread and stream, and the first activity each launched."""
        t = self.launch_table
        return _ByGroup([t["pid"], t["tid"]], t["ts"]), _ByGroup([t["pid"], t["tid"], t["stream"]], t["ts"]), t["kernel"]

    def recorded_kernel(self, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """The activity recorded by the last ``cudaEventRecord`` on the thread before
        ``ts``: the first activity of the last launch before that record (-1: none)."""
        records, record_ts = self.records
        rec = records.find([pid, tid], ts, before=True, strict=True)
        out = np.full(ts.size, -1, dtype=np.int64)
        ok = rec >= 0
        by_thread, _, kernel = self.launches
        hit = by_thread.find([pid[ok], tid[ok]], record_ts[np.maximum(rec[ok], 0)], before=True, strict=True)
        out[np.flatnonzero(ok)[hit >= 0]] = kernel[hit[hit >= 0]]
        return out

    @cached_property
    def sync_calls(self) -> dict[str, np.ndarray]:
        """Runtime calls with a ``cuda_sync`` record, by launch id: kind, device, stream, end of the sync."""
        rt = self.runtime
        calls = np.flatnonzero((rt["kind"] == 0) & (rt["launch_id"] >= 0))
        call, sync = self._sync_by_call(np.flatnonzero(rt["kind"] == 1), calls)
        by = np.argsort(rt["launch_id"][call], kind="stable")
        call, sync = call[by], sync[by]
        return {"launch_id": rt["launch_id"][call], "kind": rt["sync_kind"][sync], "device": rt["pid"][sync], "stream": rt["tid"][sync], "end": rt["end"][sync]}

    @cached_property
    def stream_waits(self) -> tuple[np.ndarray, np.ndarray]:
        """For each ``cudaStreamWaitEvent``: the recorded activity and the next one launched on
        the waiting stream from its thread (kernel ids; -1 where none)."""
        rt = self.runtime
        call, sync = self._sync_by_call(np.flatnonzero((rt["kind"] == 1) & rt["wait"]), np.flatnonzero(rt["kind"] == 0))
        if call.size == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        pid, tid, ts, stream = rt["pid"][call], rt["tid"][call], rt["ts"][call], rt["tid"][sync]
        src = self.recorded_kernel(pid, tid, ts)
        records, _ = self.records
        recorded = records.find([pid, tid], ts, before=True, strict=True) >= 0
        _, by_stream, kernel = self.launches
        nxt = by_stream.find([pid, tid, stream], ts, before=False, strict=False)
        dst = np.where(nxt >= 0, kernel[np.maximum(nxt, 0)], -1)
        keep = recorded & (src >= 0) & (dst >= 0)
        return src[keep], dst[keep]


    @cached_property
    def inferred_stream_waits(self) -> tuple[np.ndarray, np.ndarray]:
        """``stream_waits`` where the trace has no ``cuda_sync`` records (older
        traces), which name neither the event nor the streams, and whose
        ``cudaEventRecord`` calls are often not traced: a ``cudaStreamWaitEvent``
        holds the next activity its thread launches (on stream B) until the
        last activity launched before the wait on another stream of that
        device ends.  A pair is kept only where the activity did start after
        that end: a wait on an event that had fired already (or on another
        stream than guessed) leaves its activity free, and a false edge would
        take the time of the activity it ran beside."""
        rt, t = self.runtime, self.launch_table
        waits = np.flatnonzero(rt["wait_call"])
        empty = np.zeros(0, dtype=np.int64)
        if waits.size == 0 or t["ts"].size == 0:
            return empty, empty
        pid, tid, ts = rt["pid"][waits], rt["tid"][waits], rt["ts"][waits]
        by_thread, _, _ = self.launches
        dst = by_thread.find([pid, tid], ts, before=False, strict=False)
        ok = dst >= 0
        pid, ts, dst = pid[ok], ts[ok], dst[ok]
        # The last launch before the wait on each stream of the process, then the latest on another stream than dst's.
        on_stream = _ByGroup([t["pid"], t["device"], t["stream"]], t["ts"])
        src = np.full(dst.size, -1, dtype=np.int64)
        for p, device, stream in on_stream.spans:
            mine = np.flatnonzero((pid == p) & (t["device"][dst] == device) & (t["stream"][dst] != stream))
            hit = on_stream.find([pid[mine], t["device"][dst[mine]], np.full(mine.size, stream)], ts[mine], before=True, strict=True)
            later = (hit >= 0) & ((src[mine] < 0) | (t["ts"][np.maximum(hit, 0)] > t["ts"][np.maximum(src[mine], 0)]))
            src[mine[later]] = hit[later]
        keep = (src >= 0) & (t["start"][dst] >= t["end"][np.maximum(src, 0)])
        return t["kernel"][src[keep]], t["kernel"][dst[keep]]


def _by_kernel(ids: np.ndarray, kernel_ids: np.ndarray) -> np.ndarray:
    """Rows of the window's activity (kernel ``ids``) with these kernel ids (-1 where not in the window)."""
    if ids.size == 0:
        return np.full(kernel_ids.size, -1, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    at = np.minimum(np.searchsorted(ids[order], kernel_ids), ids.size - 1)
    return np.where((ids[order][at] == kernel_ids) & (kernel_ids >= 0), order[at], -1)


def _stream_waits(facts: TraceFacts, cols: _Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU -> GPU: (``src_eid``, ``src_end``, ``eid``) for each ``cudaStreamWaitEvent``:
    the activity recorded before it -> the next activity launched on the waiting stream."""
    empty = np.zeros(0, dtype=np.int64)
    kernel = cols.gpu("kernel_id")
    index = _facts_index(facts)
    if kernel.size == 0:
        return empty, empty, empty
    src, dst = index.stream_waits if index.has_sync else index.inferred_stream_waits
    a, b = _by_kernel(kernel, src), _by_kernel(kernel, dst)
    ok = (a >= 0) & (b >= 0)
    eid, end = cols.gpu("eid"), cols.gpu("end")
    rows, _ = _unique_rows(eid[a[ok]], end[a[ok]], eid[b[ok]])
    rows = rows[rows[:, 0] != rows[:, 2]]
    return rows[:, 0], rows[:, 1], rows[:, 2]


def _sync_edges(facts: TraceFacts, cols: _Columns) -> _Edges:
    """GPU -> CPU: the last activity (started by the time the sync returned) on
    each synchronized stream -> the end of the blocking call."""
    g_eid, g_ts, g_end, g_dev, g_stream = (cols.gpu(c) for c in ("eid", "ts", "end", "device", "stream"))
    if g_eid.size == 0:
        return _Edges.none()
    rt = np.flatnonzero(cols.cpu("runtime"))
    eid, pid, tid, ts, end, launch = (cols.cpu(c)[rt] for c in ("eid", "pid", "tid", "ts", "end", "launch_id"))
    streams, _ = _unique_rows(g_dev, g_stream)
    on_stream = _ByGroup([g_dev, g_stream], g_ts)
    index = _facts_index(facts)
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []

    def every_stream(rows: np.ndarray) -> tuple[np.ndarray, ...]:
        rep = np.repeat(rows, streams.shape[0])
        return rep, np.tile(streams[:, 0], rows.size), np.tile(streams[:, 1], rows.size)

    if index.has_sync:
        sc = index.sync_calls
        call, at = _matches(sc["launch_id"], np.where(launch >= 0, launch, _LOW))
        kind = sc["kind"][at]
        ctx, ctx_at = call[kind == 0], at[kind == 0]
        rep, dev, stream = every_stream(np.arange(ctx.size))
        one = kind == 1
        t_call = np.concatenate([ctx[rep], call[one]])
        t_dev = np.concatenate([dev, sc["device"][at[one]]])
        t_stream = np.concatenate([stream, sc["stream"][at[one]]])
        t_end = np.concatenate([sc["end"][ctx_at[rep]], sc["end"][at[one]]])
        hit = on_stream.find([t_dev, t_stream], t_end, before=True, strict=False)
        ok = hit >= 0
        src.append(2 * g_eid[hit[ok]] + 1)
        dst.append(2 * eid[t_call[ok]] + 1)
        event = call[kind == 2]
        if event.size:
            row = _by_kernel(cols.gpu("kernel_id"), index.recorded_kernel(pid[event], tid[event], ts[event]))
            ok = row >= 0
            src.append(2 * g_eid[row[ok]] + 1)
            dst.append(2 * eid[event[ok]] + 1)
    else:
        # No cuda_sync records (older traces): a device or stream sync waits for
        # every stream (the trace does not say which), as far as it returned
        # after the stream's last activity; a blocking copy for its own copy.
        rep, dev, stream = every_stream(np.flatnonzero(cols.cpu("sync_call")[rt]))
        hit = on_stream.find([dev, stream], end[rep], before=True, strict=False)
        ok = hit >= 0
        ok[ok] = g_end[hit[ok]] <= end[rep[ok]]
        src.append(2 * g_eid[hit[ok]] + 1)
        dst.append(2 * eid[rep[ok]] + 1)
        blocking = np.flatnonzero(cols.cpu("blocking")[rt] & (launch >= 0))
        g_launch = cols.gpu("launch_id")
        order = np.argsort(g_launch, kind="stable")
        call, at = _matches(g_launch[order], launch[blocking])
        k = order[at]
        ok = g_end[k] <= end[blocking[call]]
        src.append(2 * g_eid[k[ok]] + 1)
        dst.append(2 * eid[blocking[call[ok]]] + 1)
    pairs, _ = _unique_rows(np.concatenate(src), np.concatenate(dst))
    return _Edges(pairs[:, 0], pairs[:, 1], np.zeros(pairs.shape[0], dtype=np.int64), EDGE_TYPES.index("sync"), -1)
