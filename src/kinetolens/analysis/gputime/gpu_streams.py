"""GPU work per stream, its kernel type, and interval unions over it.

The idle-time and launch analyses (``idle.py``, ``launch.py``) all start from
the same picture: every kernel, memcpy and memset with its stream, its launch
call on the host and its type.  This module builds that picture once.

Kernel types follow the name rules PyTorch's Holistic Trace Analysis uses, so
figures compare with it, except that communication is the one rule every
kinetolens view uses (:func:`kinetolens.model.vocabulary.is_comm_kernel`:
NCCL kernels, which HTA's ``nccl...Kernel`` names, and any kernel a
collective's range launched itself); ``Memcpy...``,
``Memset...`` and ``dma...`` are memory; names that contain ``Memcpy`` or
``Sync`` elsewhere are *other*; everything else is computation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import polars as pl

from kinetolens.model.ids import rows_by_id
from kinetolens.model.trace import Trace
from kinetolens.model.vocabulary import GPU_ACTIVITY, is_comm_kernel

COMPUTATION = "COMPUTATION"
COMMUNICATION = "COMMUNICATION"
MEMORY = "MEMORY"
OTHER = "OTHER"
#: Every kernel type, in the order of :func:`kernel_type`'s rules.
KERNEL_TYPES = (COMMUNICATION, MEMORY, OTHER, COMPUTATION)

#: (kernel type, regex on the kernel name), first match wins after
#: communication; no match is computation.
KERNEL_TYPE_RULES: tuple[tuple[str, str], ...] = (
    (MEMORY, r"^(Memcpy|Memset|dma)"),
    (OTHER, r"Memcpy|Sync"),
)

#: ProfilerStep names that must exist (distinct) before the last step is dropped.
MIN_STEPS_TO_TRIM = 2


def kernel_type(name: pl.Expr, comm: pl.Expr) -> pl.Expr:
    """COMMUNICATION where ``comm`` (a communication kernel), else MEMORY /
    OTHER / COMPUTATION from the kernel name."""
    expr: pl.Expr = pl.lit(COMPUTATION)
    for kind, pattern in reversed(KERNEL_TYPE_RULES):
        expr = pl.when(name.str.contains(pattern)).then(pl.lit(kind)).otherwise(expr)
    return pl.when(comm).then(pl.lit(COMMUNICATION)).otherwise(expr)


def work_kernel_type(trace: Trace) -> pl.Expr:
    """:func:`kernel_type` of each row of ``trace.kernels`` (communication
    is a communication kernel that is a kernel, not a copy or set)."""
    comm = is_comm_kernel(trace.kernels) & (pl.col("kind").cast(pl.String) == "kernel")
    return kernel_type(pl.col("name"), comm)


def rank_of(trace: Trace) -> int:
    """The trace's distributed rank; a trace without one is rank 0."""
    return trace.rank if trace.rank is not None else 0


STREAM_WORK_COLUMNS = [
    "rank", "stream", "kind", "name", "kernel_type", "correlation", "ts", "end", "dur", "bytes", "memory_bw_gbps",
    "launch_id", "launch", "launch_ts", "launch_dur",
]  # fmt: skip


#: :func:`stream_work` columns read from the kernels as they are, and from the launch call.
_KERNEL_WORK_COLUMNS = ("name", "correlation", "dur", "bytes", "memory_bw_gbps")
_LAUNCH_WORK_COLUMNS = {"launch": "name", "launch_ts": "ts", "launch_dur": "dur"}


def _work(trace: Trace, *columns: str | pl.Expr, **named: pl.Expr) -> pl.DataFrame:
    """The kernels, copies and sets that ran on a stream, in the kernels
    table's order: ``rank, stream, kind, ts, end, launch_id`` and ``columns``.
    Only the columns asked for are filtered (a filter copies each one)."""
    k = trace.kernels
    return k.select(
        pl.lit(rank_of(trace), pl.Int64).alias("rank"),
        "stream",
        pl.col("kind").cast(pl.String),
        "ts",
        (pl.col("ts") + pl.col("dur")).alias("end"),
        "launch_id",
        *columns,
        **named,
    ).filter(pl.col("kind").is_in(GPU_ACTIVITY) & pl.col("stream").is_not_null())


def _launch_columns(trace: Trace, work: pl.DataFrame, **columns: str) -> pl.DataFrame:
    """Runtime columns (``name=column``) of each work item's launch call, null where it is not in the trace."""
    runtime = trace.runtime.select("launch_id", **{name: pl.col(c) for name, c in columns.items()})
    return rows_by_id(runtime, "launch_id", work["launch_id"], list(columns))


def stream_work(trace: Trace, columns: Sequence[str] = STREAM_WORK_COLUMNS) -> pl.DataFrame:
    """One row per kernel / memcpy / memset, with its launch call joined.

    Columns: ``rank, stream, kind, name, kernel_type, correlation, ts, end, dur,
    bytes, memory_bw_gbps, launch_id, launch, launch_ts, launch_dur`` (integer
    ns; ``memory_bw_gbps`` is Kineto's own copy bandwidth, where written), or
    those of them in ``columns``: only those are made (on a big trace the
    kernel types and launch names are hundreds of MiB).  The launch columns
    are null for work whose launch call is not in the trace.
    """
    wanted = set(columns)
    named = {"kernel_type": work_kernel_type(trace)} if "kernel_type" in wanted else {}
    work = _work(trace, *[c for c in _KERNEL_WORK_COLUMNS if c in wanted], **named)
    launch = {name: c for name, c in _LAUNCH_WORK_COLUMNS.items() if name in wanted}
    if launch:
        work = pl.concat([work, _launch_columns(trace, work, **launch)], how="horizontal")
    return work.select(*columns, *([] if "ts" in wanted else ["ts"])).sort("ts", maintain_order=True).select(columns)


def stream_times(trace: Trace) -> pl.DataFrame:
    """:func:`stream_work`'s ``rank, stream, ts, end, launch_ts``, in its
    order: what the idle gaps read, without the names and kinds they do not."""
    return stream_work(trace, ("rank", "stream", "ts", "end", "launch_ts"))


def union_intervals(frame: pl.DataFrame, by: list[str] | None = None) -> pl.DataFrame:
    """Merge overlapping ``[ts, end)`` intervals (per ``by`` group) into disjoint ones,
    in the groups' order, then by start.

    Sorted by group and start, an interval starts a merged one where its
    start is later than every end before it in its group: numpy's running
    maximum over the ends, each group's offset above the previous groups'
    (a running maximum per group in polars took a window per group), and
    each merged interval's end the largest of its parts'."""
    by = by or []
    schema = {**{c: frame.schema[c] for c in by}, "ts": pl.Int64, "end": pl.Int64}
    if frame.height == 0:
        return pl.DataFrame(schema=schema)
    ordered = frame.select(*by, "ts", "end").sort([*by, "ts"])
    ts, end = ordered["ts"].to_numpy(), ordered["end"].to_numpy()
    group = ordered.select(pl.struct(by).rle_id())[:, 0].to_numpy().astype(np.int64) if by else np.zeros(ts.size, np.int64)
    low = int(min(ts.min(), end.min()))
    span = int(max(ts.max(), end.max())) - low + 1
    if (int(group[-1]) + 1) * span >= 2**63:  # offsets that would overflow (groups far apart in time): one group at a time
        parts = [union_intervals(part, by) for part in ordered.partition_by(by, maintain_order=True)]
        return pl.concat(parts).cast(schema)
    offset = group * span - low
    running = np.maximum.accumulate(end + offset)
    first = np.ones(ts.size, dtype=bool)
    first[1:] = (group[1:] != group[:-1]) | (ts[1:] + offset[1:] > running[:-1])
    starts = np.flatnonzero(first)
    merged = ordered[starts].select(*by, "ts").with_columns(end=pl.Series(np.maximum.reduceat(end, starts), dtype=pl.Int64))
    return merged.cast(schema)


def covered_ns(intervals: pl.DataFrame) -> int:
    """Total length of disjoint intervals."""
    return int((intervals["end"] - intervals["ts"]).sum()) if intervals.height else 0


def last_step_start(trace: Trace) -> int | None:
    """Host start of the last ProfilerStep, when the trace has at least two.

    The profiler usually stops inside the last step, so its work is cut off;
    analyses that compare steady-state behaviour leave it out.
    """
    steps = trace.steps
    if steps.height == 0 or steps["name"].n_unique() < MIN_STEPS_TO_TRIM:
        return None
    return int(steps["ts"].max())  # type: ignore[arg-type]


def without_last_step(trace: Trace) -> Trace:
    """The trace restricted to work launched before the last ProfilerStep began.

    Host calls that start at or after the last step's start are dropped, and so
    is every GPU activity whose launch call is dropped or missing.  A trace
    with fewer than two steps is returned unchanged.
    """
    cutoff = last_step_start(trace)
    if cutoff is None:
        return trace
    runtime = trace.runtime.filter(pl.col("ts") < cutoff)
    kept = runtime["launch_id"].drop_nulls()
    kernels = trace.kernels.filter(pl.col("launch_id").is_in(kept.implode()))
    ops = trace.ops.filter(pl.col("ts") < cutoff)
    return dataclasses.replace(trace, runtime=runtime, kernels=kernels, ops=ops)


#: Summary statistics of a distribution, named as pandas ``describe`` names them.
DESCRIBE_COLUMNS = ("count", "mean", "std", "min", "25%", "50%", "75%", "max")


def describe(frame: pl.DataFrame, by: list[str], value: str) -> pl.DataFrame:
    """count, mean, sample std, min, quartiles (linear interpolation) and max of ``value`` per group."""
    col = pl.col(value).cast(pl.Float64)
    return (
        frame.group_by(by, maintain_order=True)
        .agg(
            col.count().cast(pl.Int64).alias("count"),
            col.mean().alias("mean"),
            col.std(ddof=1).alias("std"),
            col.min().alias("min"),
            col.quantile(0.25, "linear").alias("25%"),
            col.quantile(0.5, "linear").alias("50%"),
            col.quantile(0.75, "linear").alias("75%"),
            col.max().alias("max"),
        )
        .sort(by)
    )
