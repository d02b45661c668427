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
and the recorded work as the last launch before that record.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import polars as pl

from kinetolens.analysis.overview import _is_dataloader, is_comm_kernel
from kinetolens.model.trace import Trace

#: Runtime calls that block the CPU until GPU work is done (HTA's list, plus HIP's).
BLOCKING_CALLS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventQuery",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpyAsync",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
    "hipEventQuery",
    "hipMemcpy",
    "hipMemcpyAsync",
    "hipMemcpyWithStream",
)
#: Device synchronizations without a ``cuda_sync`` record (older traces).
DEVICE_SYNC_CALLS = ("cudaDeviceSynchronize", "hipDeviceSynchronize")
STREAM_SYNC_CALLS = ("cudaStreamSynchronize", "hipStreamSynchronize")
EVENT_RECORD_CALLS = ("cudaEventRecord", "hipEventRecord", "cudaEventRecordWithFlags", "hipEventRecordWithFlags")
GPU_ACTIVITY = ("kernel", "memcpy", "memset")

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


class TraceFacts:
    """The whole-trace tables every window's graph reads, computed once per trace."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    @cached_property
    def activity(self) -> pl.DataFrame:
        """GPU activity with ``busy_until``: the end of every earlier activity on its stream."""
        k = self.trace.kernels.filter(pl.col("kind").cast(pl.String).is_in(GPU_ACTIVITY) & (pl.col("dur") >= 0))
        return k.sort("ts").with_columns(
            busy_until=(pl.col("ts") + pl.col("dur")).cum_max().shift(1).over("device", "stream"),
            comm=is_comm_kernel(k),
        )

    @cached_property
    def launches(self) -> pl.DataFrame:
        """Runtime calls that launched GPU activity: thread, start, and the stream and first activity launched."""
        k = self.trace.kernels.filter(pl.col("launch_id").is_not_null()).group_by("launch_id").agg(
            pl.col("kernel_id").sort_by("ts").first(), pl.col("stream").sort_by("ts").first(), pl.col("device").sort_by("ts").first()
        )
        return self.trace.runtime.select("launch_id", "pid", "tid", "ts").join(k, on="launch_id", how="inner").sort("ts")

    @cached_property
    def records(self) -> pl.DataFrame:
        rt = self.trace.runtime
        return rt.filter(pl.col("name").is_in(EVENT_RECORD_CALLS)).select("pid", "tid", record_ts="ts").sort("record_ts")

    @cached_property
    def calls(self) -> pl.DataFrame:
        return self.trace.runtime.filter(pl.col("kind").cast(pl.String) == "runtime").select("launch_id", "correlation", "pid", "tid", "ts")

    @cached_property
    def sync(self) -> pl.DataFrame:
        return self.trace.runtime.filter(pl.col("kind").cast(pl.String) == "sync")

    @cached_property
    def loaders(self) -> pl.DataFrame:
        """DataLoader ``__next__`` ranges (ops in older traces, annotations in newer ones)."""
        return self.trace.ops.filter(_is_dataloader(pl.col("name")))

    @cached_property
    def _ops_by_row(self) -> bool:
        ids = self.trace.ops["op_id"]
        return bool((ids == pl.int_range(0, ids.len(), eager=True)).all())

    def op_names(self, op_ids: pl.Series) -> pl.Series:
        """The names of ops by id (ids are row numbers in the model: a gather, not a join)."""
        if self._ops_by_row:
            return self.trace.ops["name"].gather(op_ids).alias("op")
        names = self.trace.ops.select("op_id", op="name")
        return op_ids.to_frame("op_id").join(names, on="op_id", how="left", maintain_order="left")["op"]


def build_graph(trace: Trace, start: int, end: int, facts: TraceFacts | None = None) -> DependencyGraph:
    """The graph of the CPU ops and runtime calls that start in ``[start, end]``
    (ns, with a duration) and of the GPU activity they launched.  Pass the
    same ``facts`` for many windows of one trace."""
    facts = facts if facts is not None and facts.trace is trace else TraceFacts(trace)
    cpu = _cpu_events(facts, start, end)
    gpu = _gpu_events(facts, cpu)
    events = pl.concat([cpu, gpu], how="diagonal_relaxed").with_row_index("eid").with_columns(pl.col("eid").cast(pl.Int64))
    cpu = events.filter(pl.col("side") == "cpu")
    gpu = events.filter(pl.col("side") == "gpu")
    wait_src = _stream_waits(facts, cpu, gpu)
    parts = [
        _cpu_edges(cpu),
        _gpu_edges(cpu, gpu, wait_src),
        _sync_edges(facts, cpu, gpu),
        _backward_edges(cpu),
    ]
    if wait_src.height:
        parts.append(wait_src.select(src=2 * pl.col("src_eid") + 1, dst=2 * pl.col("eid"), weight=pl.lit(0), type=pl.lit("sync"), eid=pl.lit(None)))
    edges = pl.concat([p.cast(_EDGE_SCHEMA) for p in parts if p.height]) if any(p.height for p in parts) else pl.DataFrame(schema=_EDGE_SCHEMA)
    edges = edges.with_columns(pl.col("weight").clip(lower_bound=0))
    return DependencyGraph(events=events, edges=edges, start=start, end=end)


def _cpu_events(facts: TraceFacts, start: int, end: int) -> pl.DataFrame:
    trace = facts.trace
    in_window = pl.col("ts").is_between(start, end) & (pl.col("dur") > 0)
    kind = pl.col("kind").cast(pl.String)
    # Older traces write the DataLoader's range as an op, newer ones as an annotation.
    ops_in = trace.ops.filter(in_window).filter((kind == "op") | _is_dataloader(pl.col("name")))
    rt = trace.runtime.filter(in_window & (kind == "runtime"))
    rt = rt.with_columns(op=facts.op_names(rt["op_id"]))
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
        ),
        rt.select(
            side=pl.lit("cpu"),
            kind=pl.lit("runtime"),
            name="name",
            op="op",
            module="module",
            source="source",
            pid="pid",
            tid="tid",
            ts="ts",
            end="end",
            op_id="op_id",
            launch_id="launch_id",
            fwd_op_id=pl.lit(None, pl.Int64),
        ),
    ]
    cpu = pl.concat(frames, how="vertical_relaxed").with_columns(blocking=pl.col("name").is_in(BLOCKING_CALLS))
    return _mark_data_loading(cpu, facts.loaders)


def _mark_data_loading(cpu: pl.DataFrame, loaders: pl.DataFrame) -> pl.DataFrame:
    """CPU events inside a DataLoader ``__next__`` range on their thread."""
    if loaders.height == 0:
        return cpu.with_columns(data_loading=pl.lit(False))
    dl = loaders.select("pid", "tid", dl_ts="ts", dl_end="end").sort("dl_ts")
    marked = (
        cpu.with_row_index("_row")
        .sort("ts")
        .join_asof(dl, left_on="ts", right_on="dl_ts", by=["pid", "tid"], strategy="backward", check_sortedness=False)
        .with_columns(data_loading=pl.col("dl_end").is_not_null() & (pl.col("end") <= pl.col("dl_end")))
        .sort("_row")
    )
    return marked.drop("_row", "dl_ts", "dl_end")


def _gpu_events(facts: TraceFacts, cpu: pl.DataFrame) -> pl.DataFrame:
    """The activity launched by the window's runtime calls, with the end of
    every earlier activity on its stream (whole trace): the stream was empty
    at the launch when that is before the launch."""
    k = facts.activity
    launches = cpu.filter(pl.col("launch_id").is_not_null()).select("launch_id", launch_ts="ts")
    k = k.join(launches, on="launch_id", how="inner")
    return k.select(
        side=pl.lit("gpu"),
        kind=pl.col("kind").cast(pl.String),
        name="name",
        op="op",
        module="module",
        source="source",
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


def _cpu_edges(cpu: pl.DataFrame) -> pl.DataFrame:
    """Consecutive boundaries of each thread's nested ops, in call order.

    Ties sort so that nesting holds: at one time, ends before starts, the
    longer range starts first and the later-started range ends first.
    """
    starts = cpu.select(
        "eid", "pid", "tid", "blocking", t="ts", is_start=pl.lit(1), k1=pl.col("ts") - pl.col("end"), k2="eid"
    )
    ends = cpu.select("eid", "pid", "tid", "blocking", t="end", is_start=pl.lit(0), k1=-pl.col("ts"), k2=-pl.col("eid"))
    b = (
        pl.concat([starts, ends])
        .sort("pid", "tid", "t", "is_start", "k1", "k2")
        .with_row_index("pos")
        .with_columns(depth=(2 * pl.col("is_start") - 1).cum_sum().over("pid", "tid"))
        .with_columns(
            node=2 * pl.col("eid") + 1 - pl.col("is_start"),
            p_node=(2 * pl.col("eid") + 1 - pl.col("is_start")).shift(1).over("pid", "tid"),
            p_eid=pl.col("eid").shift(1).over("pid", "tid"),
            p_t=pl.col("t").shift(1).over("pid", "tid"),
            p_start=pl.col("is_start").shift(1).over("pid", "tid"),
            p_depth=pl.col("depth").shift(1).over("pid", "tid"),
        )
    )
    # After an end, the innermost open range is the last one that opened to that depth
    # (the thread's first boundary included: it opens the first top-level op).
    opened = b.filter(pl.col("is_start") == 1).select("pid", "tid", "depth", "pos", parent="eid")
    b = _parent_join(b.filter(pl.col("p_node").is_not_null()), opened)
    top_start = (pl.col("is_start") == 1) & (pl.col("depth") == 1)
    return b.select(
        src="p_node",
        dst="node",
        weight=pl.when(top_start | ((pl.col("is_start") == 0) & pl.col("blocking"))).then(0).otherwise(pl.col("t") - pl.col("p_t")),
        type=pl.when(top_start).then(pl.lit("dependency")).otherwise(pl.lit("cpu")),
        eid=pl.when(top_start)
        .then(None)
        .when(pl.col("p_start") == 1)
        .then(pl.col("p_eid"))
        .when(pl.col("is_start") == 0)
        .then(pl.col("eid"))
        .otherwise(pl.col("parent")),
    )


def _backward_edges(cpu: pl.DataFrame) -> pl.DataFrame:
    """A backward op on another thread (the autograd engine's) starts after its forward op ends."""
    fwd = cpu.filter((pl.col("kind") == "op") & pl.col("op_id").is_not_null()).select(
        fwd_op_id="op_id", f_eid="eid", f_end="end", f_pid="pid", f_tid="tid"
    )
    return (
        cpu.filter(pl.col("fwd_op_id").is_not_null())
        .join(fwd, on="fwd_op_id", how="inner")
        .filter(((pl.col("pid") != pl.col("f_pid")) | (pl.col("tid") != pl.col("f_tid"))) & (pl.col("f_end") <= pl.col("ts")))
        .select(src=2 * pl.col("f_eid") + 1, dst=2 * pl.col("eid"), weight=pl.lit(0), type=pl.lit("dependency"), eid=pl.lit(None, pl.Int64))
    )


def _parent_join(b: pl.DataFrame, opened: pl.DataFrame) -> pl.DataFrame:
    """``parent``: for an edge leaving an end at depth d, the last range opened to depth d."""
    left = b.with_columns(p_pos=pl.col("pos") - 1).sort("p_pos")
    right = opened.rename({"depth": "p_depth", "pos": "o_pos"}).sort("o_pos")
    return left.join_asof(right, left_on="p_pos", right_on="o_pos", by=["pid", "tid", "p_depth"], strategy="backward", check_sortedness=False)


def _gpu_edges(cpu: pl.DataFrame, gpu: pl.DataFrame, wait_src: pl.DataFrame) -> pl.DataFrame:
    if gpu.height == 0:
        return pl.DataFrame(schema=_EDGE_SCHEMA)
    launch_eid = cpu.filter(pl.col("launch_id").is_not_null()).select("launch_id", rt_eid="eid")
    waits = wait_src.group_by("eid").agg(sync_end=pl.col("src_end").max()) if wait_src.height else pl.DataFrame(schema={"eid": pl.Int64, "sync_end": pl.Int64})
    g = (
        gpu.join(launch_eid, on="launch_id", how="left")
        .join(waits, on="eid", how="left")
        .sort("ts", "eid")
        .with_columns(
            prev_eid=pl.col("eid").shift(1).over("device", "stream"),
            prev_end=pl.col("end").shift(1).over("device", "stream"),
        )
        .with_columns(
            launched=(pl.col("busy_until").is_null() | (pl.col("busy_until") < pl.col("launch_ts")))
            & (pl.col("sync_end").is_null() | (pl.col("sync_end") < pl.col("launch_ts"))),
        )
        .with_columns(
            queued=~pl.col("launched")
            & pl.col("prev_eid").is_not_null()
            & (pl.col("sync_end").is_null() | (pl.col("sync_end") < pl.col("prev_end")))
        )
    )
    run = g.select(src=2 * pl.col("eid"), dst=2 * pl.col("eid") + 1, weight=pl.col("end") - pl.col("ts"), type=pl.lit("kernel"), eid="eid")
    launch = g.filter(pl.col("rt_eid").is_not_null()).select(
        src=2 * pl.col("rt_eid"),
        dst=2 * pl.col("eid"),
        weight=pl.when(pl.col("launched")).then(pl.col("ts") - pl.col("launch_ts")).otherwise(0),
        type=pl.lit("launch"),
        eid="eid",
    )
    gap = g.filter(pl.col("queued")).select(
        src=2 * pl.col("prev_eid") + 1, dst=2 * pl.col("eid"), weight=pl.col("ts") - pl.col("prev_end"), type=pl.lit("kernel_gap"), eid="prev_eid"
    )
    return pl.concat([run, launch, gap])


def _records(facts: TraceFacts, calls: pl.DataFrame) -> pl.DataFrame:
    """``calls`` with ``record_ts``: the last event record on their thread before them."""
    return calls.sort("ts").join_asof(
        facts.records, left_on="ts", right_on="record_ts", by=["pid", "tid"], strategy="backward", check_sortedness=False, allow_exact_matches=False
    )


def _stream_waits(facts: TraceFacts, cpu: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """GPU -> GPU: (``src_eid``, ``src_end``, ``eid``) for each ``cudaStreamWaitEvent``:
    the activity recorded before it -> the next activity launched on the waiting stream."""
    empty = pl.DataFrame(schema={"src_eid": pl.Int64, "src_end": pl.Int64, "eid": pl.Int64})
    waits = facts.sync.filter(pl.col("name") == "Stream Wait Event")
    if waits.height == 0 or gpu.height == 0:
        return empty
    calls = facts.calls.select("correlation", "pid", "tid", "ts")
    w = waits.select("correlation", wait_stream="tid").join(calls, on="correlation", how="inner")
    w = _records(facts, w).filter(pl.col("record_ts").is_not_null())
    launches = facts.launches
    by_kernel = gpu.select("kernel_id", "eid", "end")
    # Source: the last launch on the thread before the record.
    src = _asof_sources(w, launches, by_kernel)
    dst = (
        w.select("correlation", "pid", "tid", "ts", "wait_stream")
        .sort("ts")
        .join_asof(
            launches.select("pid", "tid", "kernel_id", wait_stream="stream", l_ts="ts").sort("l_ts"),
            left_on="ts",
            right_on="l_ts",
            by=["pid", "tid", "wait_stream"],
            strategy="forward", check_sortedness=False,
        )
        .join(by_kernel.drop("end"), on="kernel_id", how="inner")
        .select("correlation", "eid")
    )
    out = src.join(dst, on="correlation", how="inner").select("src_eid", "src_end", "eid").unique()
    return out.filter(pl.col("src_eid") != pl.col("eid")) if out.height else empty


def _asof_sources(w: pl.DataFrame, launches: pl.DataFrame, by_kernel: pl.DataFrame) -> pl.DataFrame:
    return (
        w.sort("record_ts")
        .join_asof(launches.select("pid", "tid", "kernel_id", l_ts="ts").sort("l_ts"), left_on="record_ts", right_on="l_ts", by=["pid", "tid"], strategy="backward", check_sortedness=False, allow_exact_matches=False)
        .join(by_kernel.rename({"eid": "src_eid", "end": "src_end"}), on="kernel_id", how="inner")
        .select("correlation", "src_eid", "src_end")
    )


def _sync_edges(facts: TraceFacts, cpu: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """GPU -> CPU: the last activity (started by the time the sync returned) on
    each synchronized stream -> the end of the blocking call."""
    if gpu.height == 0:
        return pl.DataFrame(schema=_EDGE_SCHEMA)
    corr = facts.calls.select("launch_id", "correlation")
    calls = cpu.filter(pl.col("kind") == "runtime").select("eid", "name", "pid", "tid", "ts", "end", "launch_id").join(corr, on="launch_id", how="left")
    sync = facts.sync.select("correlation", sync_name="name", s_device="pid", s_stream="tid", s_end="end")
    streams = gpu.select("device", "stream").unique()
    if sync.height:
        matched = calls.join(sync, on="correlation", how="inner")
        device = matched.filter(pl.col("sync_name") == "Context Sync").join(streams, how="cross")
        stream = matched.filter(pl.col("sync_name") == "Stream Sync").select(
            pl.exclude("s_device", "s_stream"), device="s_device", stream="s_stream"
        )
        targets = pl.concat([device.select("eid", "end", "device", "stream", "s_end"), stream.select("eid", "end", "device", "stream", "s_end")])
        event = matched.filter(pl.col("sync_name") == "Event Sync")
    else:
        # No cuda_sync records (older traces): a device or stream sync waits for
        # every stream (the trace does not say which), as far as it returned
        # after the stream's last activity; a blocking copy for its own copy.
        waits = calls.filter(pl.col("name").is_in(DEVICE_SYNC_CALLS + STREAM_SYNC_CALLS))
        targets = waits.join(streams, how="cross").select("eid", "end", "device", "stream", s_end="end")
        event = calls.clear()
        own = (
            calls.filter(pl.col("name").is_in(BLOCKING_CALLS))
            .join(gpu.select("launch_id", k_eid="eid", k_end="end"), on="launch_id", how="inner")
            .filter(pl.col("k_end") <= pl.col("end"))
            .select(src=2 * pl.col("k_eid") + 1, dst=2 * pl.col("eid") + 1)
        )
    k = gpu.select("device", "stream", "ts", k_eid="eid", k_end="end").sort("ts")
    last = (
        targets.sort("s_end")
        .join_asof(k, left_on="s_end", right_on="ts", by=["device", "stream"], strategy="backward", check_sortedness=False)
        .filter(pl.col("k_eid").is_not_null() & (sync.height > 0 or pl.col("k_end") <= pl.col("end")))
        .select(src=2 * pl.col("k_eid") + 1, dst=2 * pl.col("eid") + 1)
    )
    parts = [last] if sync.height else [last, own]
    if event.height:
        launches = facts.launches
        ev = (
            _records(facts, event.select("eid", "pid", "tid", "ts"))
            .filter(pl.col("record_ts").is_not_null())
            .sort("record_ts")
            .join_asof(
                launches.select("pid", "tid", "kernel_id", l_ts="ts").sort("l_ts"),
                left_on="record_ts",
                right_on="l_ts",
                by=["pid", "tid"],
                strategy="backward", check_sortedness=False,
                allow_exact_matches=False,
            )
            .join(gpu.select("kernel_id", k_eid="eid"), on="kernel_id", how="inner")
            .select(src=2 * pl.col("k_eid") + 1, dst=2 * pl.col("eid") + 1)
        )
        parts.append(ev)
    out = pl.concat(parts).unique()
    return out.with_columns(weight=pl.lit(0), type=pl.lit("sync"), eid=pl.lit(None, pl.Int64))
