"""Memory over time: the allocator's curve per device, its peak, and the op behind each event.

The profiler's ``[memory]`` instants (``trace.memory``) record every allocator
call with the byte delta (negative = free), the address, and, in recent
PyTorch, the allocator's running totals (``total_allocated``,
``total_reserved``).  Everything here derives from those rows:

* :func:`memory_events`: each event with its device label and the innermost op
  on the same thread whose ``[ts, end)`` encloses it (the op that asked for or
  released the memory), found with an as-of join plus a walk up the parents,
  so cost grows with nesting depth, not with the number of events.
* :func:`memory_curve` / :func:`memory_peaks` / :func:`peak_memory`: allocated
  and reserved bytes over time and their maxima (with the op and module at
  the peak).  A GPU allocator's totals cover everything alive on the device
  (``basis = "allocator"``), and the bytes alive when the window opened are
  known (``live_at_start``).  Old traces carry no totals, and torch's CPU
  allocator counts only what it allocated while profiling: those curves
  cover only memory allocated inside the window (``basis = "window_sum"``);
  what was alive before it (parameters, optimizer state, data) is missing.
* :func:`op_memory_stats`: torch-tb-profiler's memory view (calls, allocation
  and free counts and sizes, increase), self and including children.

Allocation/free pairing, lifetimes and leaks are in
:mod:`kinetolens.analysis.memory.allocations`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kinetolens.analysis.memory.basis import ALLOCATOR, WINDOW_SUM
from kinetolens.analysis.session import per_trace
from kinetolens.model.ids import rows_by_id
from kinetolens.model.ownership import starts_in
from kinetolens.model.trace import Trace

#: c10::DeviceType numbers as they appear in ``Device Type``.  CUDA and HIP
#: both print as ``GPU<id>``, the label torch-tb-profiler uses.
DEVICE_TYPE_NAMES: dict[int, str] = {
    0: "CPU",
    1: "GPU",
    6: "GPU",
    9: "XLA",
    12: "XPU",
    13: "MPS",
    15: "HPU",
    19: "MTIA",
    20: "PrivateUse1",
}

#: Kineto's ``Device Type`` of CPU memory events.
CPU_DEVICE_TYPE = 0



def how_to_record_memory(trace_format: str, pytorch: bool = True) -> str:
    """What records the allocator events the memory views read, for a trace of this format (one sentence)."""
    if not pytorch:
        return "the memory views read PyTorch's caching-allocator events, which a program that is not PyTorch has none of"
    if trace_format.startswith("nsys"):
        return (
            "an Nsight Systems export holds no PyTorch allocator events (nsys --cuda-memory-usage=true records "
            "GPU memory usage for Nsight's own view only); capture a Kineto trace with "
            "torch.profiler.profile(profile_memory=True) or kinetolens.profile(sample_rate=N) for this view"
        )
    return "record with torch.profiler.profile(profile_memory=True) or kinetolens.profile(sample_rate=N)"


def device_label() -> pl.Expr:
    """``CPU``, ``GPU<id>`` (CUDA/HIP) or ``<TYPE><id>`` for other devices."""
    name = pl.col("device_type").replace_strict(
        DEVICE_TYPE_NAMES, default=None, return_dtype=pl.String
    ).fill_null(pl.lit("dev") + pl.col("device_type").cast(pl.String))
    return (
        pl.when(pl.col("device_type") == 0)
        .then(pl.lit("CPU"))
        .otherwise(name + pl.col("device_id").cast(pl.String).fill_null(""))
        .alias("device")
    )


def with_device_label(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (``device_type``, ``device_id``) with :func:`device_label`'s
    ``device``, each label made once per device and joined to the events
    (made per event, the text was half the cost of a trace's memory curve)."""
    labels = frame.select("device_type", "device_id").unique().with_columns(device_label())
    return frame.join(labels, on=["device_type", "device_id"], how="left", maintain_order="left", nulls_equal=True)


def enclosing_ops(events: pl.DataFrame, ops: pl.DataFrame) -> pl.Series:
    """For each row of ``events`` (pid, tid, ts), the ``op_id`` of the innermost
    op on that thread with ``ts <= event.ts < end``, or null.

    Per thread, a binary search finds the latest-starting op at or before the
    event (the deepest one among ops starting together); if that op already
    ended, the answer is one of its ancestors, so rows that miss step to
    their parent until each lands inside its op or runs out of parents.
    Half-open intervals follow torch-tb-profiler: an event exactly at an op's
    end belongs to what comes after it.

    Numpy arrays of a few numbers per op and event: an as-of join by thread
    held its groups' tables (110 MiB for a 500 MB trace's memory events).
    """
    if events.height == 0:
        return pl.Series("op_id", [], dtype=pl.Int64)
    ops = _ops_that_may_enclose(events, ops)
    n_ops = ops.height
    if n_ops == 0:
        return pl.Series("op_id", [None] * events.height, dtype=pl.Int64)
    thread = pl.concat([ops.select("pid", "tid"), events.select("pid", "tid")])
    code = thread.select(pl.struct("pid", "tid").rank("dense").cast(pl.Int64))[:, 0].to_numpy()
    known = ~thread.select(pl.col("pid").is_null() | pl.col("tid").is_null())[:, 0].to_numpy()
    code = np.where(known, code, -1)  # a row without its thread is inside no op
    op_code, ev_code = code[:n_ops], code[n_ops:]
    del thread, code, known
    op_ts = ops["ts"].to_numpy()
    ev_ts = events["ts"].to_numpy()
    order = np.lexsort((ops["depth"].fill_null(0).to_numpy(), op_ts, op_code))  # by thread, start, depth
    sorted_code, sorted_ts = op_code[order], op_ts[order]
    found = np.full(ev_ts.size, -1, dtype=np.int64)  # a row of ``ops``
    for c in np.unique(ev_code[ev_code >= 0]):
        lo, hi = np.searchsorted(sorted_code, [c, c + 1])
        if hi == lo:  # a thread without ops
            continue
        mine = np.flatnonzero(ev_code == c)
        at = np.searchsorted(sorted_ts[lo:hi], ev_ts[mine], side="right") - 1
        found[mine] = np.where(at >= 0, order[lo + np.maximum(at, 0)], -1)
    ids = ops["op_id"].to_numpy()
    end = ops["end"].to_numpy()
    rows = ops.select("op_id").with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    parent = rows_by_id(rows, "op_id", ops["parent_id"], ["row"])["row"].fill_null(-1).to_numpy()  # the parent's row
    for _ in range(int(ops["depth"].max() or 0) + 2 if n_ops else 0):
        outside = (found >= 0) & (end[np.maximum(found, 0)] <= ev_ts)
        if not outside.any():
            break
        found[outside] = parent[found[outside]]
    out = pl.Series("op_id", np.where(found >= 0, ids[np.maximum(found, 0)], 0), dtype=pl.Int64)
    return out.scatter(np.flatnonzero(found < 0), None) if (found < 0).any() else out


#: Threads of the events up to which :func:`_ops_that_may_enclose` narrows the search.
_FEW_THREADS = 8


def _ops_that_may_enclose(events: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """The ops :func:`enclosing_ops` searches: those on the events' threads
    that start by the last event (an enclosing op and all its ancestors are
    among them), when that leaves out most ops: the peak events alone (the
    summary) then cost a few numbers per op of their thread's early part,
    not per op of the trace."""
    threads = events.select("pid", "tid").unique().drop_nulls().rows()
    if len(threads) > _FEW_THREADS:
        return ops
    # A comparison per thread: no hash of every op's thread.
    on_thread = pl.any_horizontal([(pl.col("pid") == pid) & (pl.col("tid") == tid) for pid, tid in threads] or [pl.lit(False)])
    mask = ops.select((pl.col("ts") <= events["ts"].max()) & on_thread).to_series().fill_null(False)
    if mask.sum() * 2 > ops.height:
        return ops
    return ops.select("op_id", "pid", "tid", "ts", "end", "depth", "parent_id").filter(mask)


def _enclosing_op_rows(events: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """For each event, its enclosing op (:func:`enclosing_ops`): ``op_id``,
    ``op`` (name), ``op_kind`` and ``module``; nulls where none."""
    op_id = enclosing_ops(events, ops)
    names = ops.select("op_id", op="name", op_kind="kind", module="module")
    return pl.concat([op_id.to_frame(), rows_by_id(names, "op_id", op_id, ["op", "op_kind", "module"])], how="horizontal")


def memory_events(trace: Trace) -> pl.DataFrame:
    """``trace.memory`` in time order (ties keep file order, column ``seq``),
    with ``device`` and the enclosing op's ``op_id``, ``op``, ``op_kind`` and
    ``module``."""
    mem = with_device_label(trace.memory.with_row_index("seq").with_columns(pl.col("seq").cast(pl.Int64)))
    # The kind spelled out for the events' ops only, not for every op.
    found = _enclosing_op_rows(mem, trace.ops).with_columns(pl.col("op_kind").cast(pl.String))
    events = pl.concat([mem, found], how="horizontal")
    # Recorded in time order as a rule: then the sort would only copy every column.
    return events if mem["ts"].is_sorted() else events.sort("ts", "seq")


def _with_allocated(events: pl.DataFrame) -> pl.DataFrame:
    """``allocated``: the allocator's own total where the trace has it, else
    the running sum of deltas per device; ``basis`` says what that covers."""
    window_sum = pl.col("bytes").fill_null(0).cum_sum().over("device")
    has_totals = pl.col("total_allocated").is_not_null().all().over("device")
    # The CUDA (and other device) caching allocators report everything alive
    # on the device; torch's CPU allocator counts only what it allocated while
    # a profiler ran, so a CPU total leaves out memory held before the window.
    whole = has_totals & (pl.col("device_type") != CPU_DEVICE_TYPE)
    return events.with_columns(
        allocated=pl.when(has_totals).then(pl.col("total_allocated")).otherwise(window_sum),
        reserved=pl.col("total_reserved"),
        basis=pl.when(whole).then(pl.lit(ALLOCATOR)).otherwise(pl.lit(WINDOW_SUM)),
    )


def _per_device() -> list[pl.Expr]:
    """The figures every view shows per device, from a curve of :func:`_with_allocated`."""
    return [
        pl.col("allocated").max().alias("peak_allocated"),
        pl.col("basis").first().alias("basis"),
        # Alive before the first event: known only where the totals cover the whole device.
        pl.when(pl.col("basis").first() == ALLOCATOR)
        .then(pl.col("allocated").first() - pl.col("bytes").fill_null(0).first())
        .alias("live_at_start"),
    ]


@per_trace  # a row per device, read by the GPU table, the summary's memory block and its rule
def peak_memory(trace: Trace) -> pl.DataFrame:
    """Per device: ``device`` label, ``device_type``, ``device_id``,
    ``peak_allocated``, ``basis``, ``live_at_start`` (bytes alive when the
    window opened, null where the trace cannot tell), and the first event at
    the peak: ``peak_ts``, ``peak_op_id``, ``peak_op``, ``peak_module``.

    The one definition of peak memory: :func:`memory_peaks` gives the same
    numbers from every event with its op (the memory views), and the GPU table
    of the overview (:func:`kinetolens.analysis.hardware.gpu_metrics.gpu_metrics`)
    reads this.  The op is found for the peak events alone, not for every
    event as :func:`memory_events` does.
    """
    curve = _curve(trace.memory)
    peaks = _peaks(curve)
    at = _first_at_peak(curve).select("device", "pid", "tid", "ts")
    found = _enclosing_op_rows(at, trace.ops).select(peak_op_id="op_id", peak_op="op", peak_module="module")
    at = pl.concat([at.select("device", peak_ts="ts"), found], how="horizontal")
    return peaks.join(at, on="device", how="left").sort("device")


#: The allocator events' columns the peaks read (and the thread, where the op at the peak is looked for).
PEAK_COLUMNS = ("ts", "device_type", "device_id", "bytes", "total_allocated", "total_reserved")


def _curve(memory: pl.DataFrame) -> pl.DataFrame:
    columns = [c for c in ("pid", "tid", *PEAK_COLUMNS) if c in memory.columns]
    mem = with_device_label(memory.select(columns).with_row_index("seq"))
    # Recorded in time order as a rule: then the sort would only copy every column.
    return _with_allocated(mem if mem["ts"].is_sorted() else mem.sort("ts", "seq"))


def _peaks(curve: pl.DataFrame) -> pl.DataFrame:
    return curve.group_by("device").agg(pl.col("device_type").first(), pl.col("device_id").first(), *_per_device())


def peaks_of(memory: pl.DataFrame) -> pl.DataFrame:
    """:func:`peak_memory` without the op at each peak, from the allocator
    events alone (:data:`PEAK_COLUMNS`; a trace read a step at a time holds those, not its ops)."""
    return _peaks(_curve(memory)).sort("device")


def _first_at_peak(curve: pl.DataFrame) -> pl.DataFrame:
    """Each device's first event (in curve order) at its highest allocated
    bytes: the rows at the peak picked out, not the curve sorted (a sort
    copied every column of every event, op and module names included)."""
    return (
        curve.with_row_index("_row")
        .filter(pl.col("allocated") == pl.col("allocated").max().over("device"))
        .group_by("device", maintain_order=True)
        .first()
    )


def memory_curve(events: pl.DataFrame) -> pl.DataFrame:
    """One row per allocator event: device, ts (ns), bytes, allocated,
    reserved (null where the trace lacks it), basis, op, module."""
    return _with_allocated(events).select(
        "device", "ts", "bytes", "allocated", "reserved", "basis", "op_id", "op", "module"
    )


def memory_peaks(events: pl.DataFrame) -> pl.DataFrame:
    """Per device: the highest allocated bytes, when, under which op and
    module, plus the highest reserved, the final allocated bytes and how many
    events had no enclosing op."""
    curve = _with_allocated(events)
    # Devices by their peak (:func:`peak_memory` picks the same event).
    at_peak = (
        _first_at_peak(curve)
        .sort(["allocated", "_row"], descending=[True, False])
        .select(
            "device",
            pl.col("allocated").alias("peak_allocated"),
            pl.col("ts").alias("peak_ts"),
            pl.col("op").alias("peak_op"),
            pl.col("op_id").alias("peak_op_id"),
            pl.col("module").alias("peak_module"),
        )
    )
    totals = curve.group_by("device").agg(
        *[e for e in _per_device() if e.meta.output_name() != "peak_allocated"],
        events=pl.len(),
        allocations=(pl.col("bytes") > 0).sum(),
        frees=(pl.col("bytes") < 0).sum(),
        allocated_bytes=pl.col("bytes").clip(lower_bound=0).sum(),
        freed_bytes=(-pl.col("bytes")).clip(lower_bound=0).sum(),
        peak_reserved=pl.col("reserved").max(),
        final_allocated=pl.col("allocated").last(),
        first_ts=pl.col("ts").first(),
        last_ts=pl.col("ts").last(),
        unattributed_events=pl.col("op_id").is_null().sum(),
    )
    return at_peak.join(totals, on="device").sort("peak_allocated", descending=True)


def _ancestors(ops: pl.DataFrame, of: pl.Series) -> pl.DataFrame:
    """Every (op_id, ancestor_id) pair of the ops ``of`` (op ids), the op
    itself included, by repeated parent joins (as many rounds as the deepest
    nesting): for the ops that enclose an event, not for every op (a trace's
    every op times its depth was the memory view's largest table)."""
    parents = ops.select("op_id", "parent_id")
    start = of.unique().to_frame("op_id")
    pairs = start.select("op_id", pl.col("op_id").alias("ancestor_id"))
    frontier = start.join(parents, on="op_id").select("op_id", pl.col("parent_id").alias("ancestor_id")).drop_nulls()
    while frontier.height:
        pairs = pl.concat([pairs, frontier])
        frontier = (
            frontier.join(parents, left_on="ancestor_id", right_on="op_id")
            .select("op_id", pl.col("parent_id").alias("ancestor_id"))
            .drop_nulls()
        )
    return pairs


def _byte_aggregates(prefix: str) -> list[pl.Expr]:
    alloc = pl.col("bytes") > 0
    free = pl.col("bytes") < 0
    return [
        alloc.sum().alias(f"{prefix}alloc_count"),
        pl.col("bytes").filter(alloc).sum().alias(f"{prefix}alloc_bytes"),
        free.sum().alias(f"{prefix}free_count"),
        (-pl.col("bytes").filter(free)).sum().alias(f"{prefix}free_bytes"),
        pl.col("bytes").sum().alias(f"{prefix}increase_bytes"),
    ]


def op_memory_stats(events: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """torch-tb-profiler's memory view, per device and op name.

    ``self_*`` counts the events whose innermost enclosing op is that op;
    the unprefixed columns include every op nested inside it.  Like the
    tb plugin, annotations (``ProfilerStep#N``, ``Optimizer.step``,
    ``record_function`` blocks) get no row.  Like torch's
    ``key_averages()``, an op called from an op of the same name (``aten::sum``
    dispatching to ``aten::sum``) is one call, and an event under both counts
    once for that name, so totals equal torch's ``cpu_memory_usage``.
    """
    return merged_op_memory_stats([op_memory_part(events, ops)])


@dataclass(frozen=True)
class OpMemoryPart:
    """One part's sums of :func:`op_memory_stats` (a trace read a step window
    at a time adds its windows' parts up): per device and op name, the bytes
    of its events with (``inclusive``) and without (``own``) nested ops, and
    per op name the calls it owns."""

    inclusive: pl.DataFrame
    own: pl.DataFrame
    calls: pl.DataFrame


def op_memory_part(events: pl.DataFrame, ops: pl.DataFrame, own: tuple[int, int] | None = None) -> OpMemoryPart:
    """The sums of :func:`op_memory_stats` over ``events`` (those a part owns)
    and the calls of ``ops`` (with ``own``, ``lo, hi`` ns: only those starting
    then, the calls that part owns; its events' enclosing ops are all in it)."""
    attributed = events.filter(pl.col("op_id").is_not_null()).select("seq", "device", "op_id", "bytes")
    is_op = ops.select("op_id", "name", (pl.col("kind").cast(pl.String) == "op").alias("is_op"))
    self_stats = (
        attributed.join(is_op, on="op_id")
        .filter("is_op")
        .group_by("device", "name")
        .agg(_byte_aggregates("self_"))
    )
    inclusive = (
        attributed.join(_ancestors(ops, attributed["op_id"]), on="op_id")
        .join(is_op, left_on="ancestor_id", right_on="op_id")
        .filter("is_op")
        .unique(["seq", "name"])
        .group_by("device", "name")
        .agg(_byte_aggregates(""))
    )
    parent_names = ops.select(pl.col("op_id").alias("parent_id"), pl.col("name").alias("parent_name"))
    # The columns the calls need picked first: a filter copies every column it keeps.
    mine = ops.select("name", "parent_id", "ts", "kind")
    owned = mine if own is None else mine.filter(starts_in(own))
    calls = (
        owned.filter(pl.col("kind").cast(pl.String) == "op")
        .join(parent_names, on="parent_id", how="left")
        .filter(pl.col("parent_name").is_null() | (pl.col("parent_name") != pl.col("name")))
        .group_by("name")
        .agg(calls=pl.len())
    )
    return OpMemoryPart(inclusive, self_stats, calls)


def merged_op_memory_stats(parts: list[OpMemoryPart]) -> pl.DataFrame:
    """:func:`op_memory_stats` from its parts' sums."""

    def summed(frames: list[pl.DataFrame], by: list[str]) -> pl.DataFrame:
        frame = pl.concat(frames)
        return frame if len(frames) == 1 else frame.group_by(by).agg(pl.exclude(by).sum())

    inclusive = summed([p.inclusive for p in parts], ["device", "name"])
    self_stats = summed([p.own for p in parts], ["device", "name"])
    calls = summed([p.calls for p in parts], ["name"])
    zero = [c for c in self_stats.columns if c.startswith("self_")]
    return (
        inclusive.join(self_stats, on=["device", "name"], how="left")
        .with_columns(pl.col(zero).fill_null(0))
        .join(calls, on="name", how="left")
        .select(
            "device",
            pl.col("name").alias("op"),
            "calls",
            "alloc_count",
            "alloc_bytes",
            "free_count",
            "free_bytes",
            "increase_bytes",
            *zero,
        )
        .sort("self_alloc_bytes", "alloc_bytes", "op", descending=[True, True, False])
    )


def resolve_device(events: pl.DataFrame, wanted: str) -> str:
    """The device label meant by ``wanted``: a label (``GPU1``, ``cpu``) or a
    device index (``1``; ``-1`` is the CPU).  ValueError names the choices."""
    labels = events.select("device", "device_type", "device_id").unique().sort("device")
    by_label = {d.upper(): d for d in labels["device"].to_list()}
    if wanted.strip().upper() in by_label:
        return by_label[wanted.strip().upper()]
    try:
        index = int(wanted)
    except ValueError:
        index = None
    if index is not None:
        hits = labels.filter((pl.col("device_id") == index) & ((pl.col("device_type") != 0) | (index == -1)))
        if hits.height == 1:
            return str(hits["device"][0])
    choices = ", ".join(labels["device"].to_list()) or "none"
    raise ValueError(f"no device {wanted!r} among the memory events (devices: {choices})")


def category_timeline(raw: pl.DataFrame, resolution_ns: int = 1) -> pl.DataFrame:
    """Bytes alive per tensor category over time from torch's raw memory
    timeline (:func:`kinetolens.ingest.memory_timeline.read_memory_timeline`):
    one row per distinct time (``ts`` floored to ``resolution_ns``; the state
    after that time's last event), a column per category and ``total``.

    ``resolution_ns=1000`` reproduces the microsecond steps of torch's own
    ``export_memory_timeline`` plot, which can hide a peak that lasts less
    than a microsecond.
    """
    steps = (
        raw.sort("ts", "seq")
        .with_columns(
            ts=(pl.col("ts") // resolution_ns) * resolution_ns,
            alive=pl.col("bytes").cum_sum().over("category"),
        )
        .pivot(on="category", index=["seq", "ts"], values="alive")
        .sort("seq")
    )
    categories = [c for c in steps.columns if c not in ("seq", "ts")]
    return (
        steps.with_columns(pl.col(categories).forward_fill().fill_null(0))
        .group_by("ts", maintain_order=True)
        .last()
        .drop("seq")
        .with_columns(total=pl.sum_horizontal(categories))
    )


def category_peak(timeline: pl.DataFrame) -> dict[str, int]:
    """The row of :func:`category_timeline` with the most bytes alive (the
    first such), as ``{"ts": ..., "total": ..., <category>: ...}``."""
    row = timeline.sort("total", descending=True, maintain_order=True).row(0, named=True)
    return {k: int(v) for k, v in row.items()}
