"""How GPU work is launched: launch cost, launch delay, queue depth, copy bandwidth.

* :func:`launch_stats`: per launch call, the host call's duration, the GPU
  duration of the work it released, and the delay from the end of the call
  to the start on the GPU (0 when the work started before the call
  returned).  A CUDA/HIP graph launch is one call that releases many kernels
  under one correlation id: it counts once, with the number it released.
* :func:`launch_summary` / :func:`short_kernels` / :func:`multi_kernel_launches`:
  the distribution of those three, the kernels whose launch costs more than
  they run, and what launches of several activities (graphs) released.
* :func:`queue_length` / :func:`queue_length_summary`: outstanding launches
  per stream over time (+1 when a launch call starts, -1 when its work
  starts).
* :func:`memory_bandwidth` / :func:`memory_bw_summary`: bytes per second of
  each memcpy / memset kind, and the summed bandwidth while copies of one
  kind run at once.

Integer nanoseconds inside, microseconds (and GB/s) in the presented columns.
"""

from __future__ import annotations

from collections.abc import Collection

import polars as pl

from kinetolens.analysis.gputime.gpu_streams import MEMORY, describe, stream_work
from kinetolens.analysis.gputime.thresholds import SHORT_LAUNCH_US
from kinetolens.model.ownership import owned_kernels, unique_in_trace
from kinetolens.model.trace import Trace

NS_PER_US = 1000.0

#: Characters of a memcpy name that name its direction (``Memcpy HtoD``).
MEMCPY_KIND_CHARS = len("Memcpy HtoD")

#: Summed bandwidths below this (GB/s) are float residue of adding and removing copies.
BW_RESIDUE_GBPS = 1e-9

LAUNCH_COLUMNS = ("cpu_duration_us", "gpu_duration_us", "launch_delay_us")


def us_sum(column: str) -> pl.Expr:
    """The sum of a µs column of times the trace clocked in whole ns, added
    as integer ns: exact, so the same however polars splits the rows to add
    them (a trace read whole, or a step window at a time)."""
    return (pl.col(column) * NS_PER_US).round().cast(pl.Int64).sum() / NS_PER_US


def us_mean(column: str) -> pl.Expr:
    """The mean of such a column, from its exact :func:`us_sum`."""
    return us_sum(column) / pl.col(column).count()


#: The :func:`~kinetolens.analysis.gputime.gpu_streams.stream_work` columns the launch views read.
LAUNCHED_COLUMNS = (
    "rank", "stream", "kind", "name", "correlation", "ts", "dur", "launch_id", "launch", "launch_ts", "launch_dur",
)


#: The stream work every table of ``kinetolens launches`` reads (:func:`launch_work`).
LAUNCH_WORK_COLUMNS = (*LAUNCHED_COLUMNS, "kernel_type", "end", "bytes", "memory_bw_gbps")


def launch_work(trace: Trace, own: tuple[int, int] | None = None) -> pl.DataFrame:
    """:func:`~kinetolens.analysis.gputime.gpu_streams.stream_work`'s
    :data:`LAUNCH_WORK_COLUMNS`, in start order.  With ``own`` (``lo, hi``
    ns), only the GPU activities that part of the trace owns
    (:func:`~kinetolens.model.ownership.owned_kernels`: a launch's activities
    are all in the part of its call)."""
    work = stream_work(trace, LAUNCH_WORK_COLUMNS)
    return work if own is None else work.filter(owned_kernels(*own))


def launch_work_part(trace: Trace, own: tuple[int, int], part: int) -> pl.DataFrame:
    """:func:`launch_work` of the ``part``-th part of a trace read in parts
    (owning ``own``), as the parts are stacked: names as categories (they
    repeat every step; held once each), launch ids made unique in the trace
    (:func:`~kinetolens.model.ownership.unique_in_trace`)."""
    texts = pl.col("kind", "name", "launch").cast(pl.Categorical)
    return launch_work(trace, own).with_columns(texts, unique_in_trace("launch_id", part))


def launch_tables(work: pl.DataFrame, short_us: float = SHORT_LAUNCH_US) -> dict[str, pl.DataFrame]:
    """Every table of ``kinetolens launches`` from :func:`launch_work` (of a
    trace, or of its parts stacked in start order with each part's launch ids
    made unique: :func:`~kinetolens.model.ownership.unique_in_trace`).  Text
    held as categories is made text first: grouped by category, the sums of
    a group would be added in another order, and differ in their last digit."""
    work = work.with_columns(pl.col(pl.Categorical).cast(pl.String))
    stats = launch_stats_of(work)
    return {
        "launch_summary": launch_summary(stats),
        "short_kernels": short_kernels(stats, short_us),
        "multi_kernel_launches": multi_kernel_launches(stats),
        "queue_length": queue_length_summary_of(work),
        "memory_bandwidth_gbps": memory_bw_summary_of(work),
    }


def launched(work: pl.DataFrame, calls: Collection[str] | None = None) -> pl.DataFrame:
    """The rows of ``work`` whose launch call is in the trace (and, if given, named in ``calls``)."""
    work = work.filter(pl.col("launch_ts").is_not_null())
    return work if calls is None else work.filter(pl.col("launch").is_in(list(calls)))


def launch_stats(trace: Trace, calls: Collection[str] | None = None) -> pl.DataFrame:
    """One row per launch call in the trace whose GPU work is in it too.

    ``calls`` restricts the launch APIs counted (for example only
    ``cudaLaunchKernel``); by default every call that launched GPU work counts,
    including driver launches (``cuLaunchKernel``) and graph launches.
    A call that released several activities (a graph launch) is one row:
    ``kernels`` says how many, ``name``, ``stream`` and ``kind`` are the
    first one's, the GPU duration is their summed durations and the delay
    runs to the first one's start.
    Columns: ``rank, stream, correlation, name, launch, kind, kernels,
    cpu_duration_us, gpu_duration_us, launch_delay_us``, in launch order.
    """
    return launch_stats_of(stream_work(trace, LAUNCHED_COLUMNS), calls)


def launch_stats_of(work: pl.DataFrame, calls: Collection[str] | None = None) -> pl.DataFrame:
    """:func:`launch_stats` of stream work in start order (:func:`launch_work`)."""
    # Work is in start order, so each call's first row is its first activity.
    work = (
        launched(work, calls)
        .group_by("launch_id", maintain_order=True)
        .agg(
            pl.col("rank", "stream", "correlation", "name", "launch", "kind", "launch_ts", "launch_dur", "ts").first(),
            pl.len().alias("kernels"),
            pl.col("dur").sum(),
        )
        .sort("launch_ts", maintain_order=True)
    )
    delay = (pl.col("ts") - pl.col("launch_ts") - pl.col("launch_dur")).clip(lower_bound=0)
    return work.select(
        "rank",
        "stream",
        "correlation",
        "name",
        "launch",
        "kind",
        pl.col("kernels").cast(pl.Int64),
        (pl.col("launch_dur") / NS_PER_US).alias("cpu_duration_us"),
        (pl.col("dur") / NS_PER_US).alias("gpu_duration_us"),
        (delay / NS_PER_US).alias("launch_delay_us"),
    )


def launch_summary(stats: pl.DataFrame) -> pl.DataFrame:
    """count, mean, median, sum, min, max and negatives of each launch column, per rank."""
    rows = []
    for column in LAUNCH_COLUMNS:
        col = pl.col(column)
        rows.append(
            stats.group_by("rank", maintain_order=True).agg(
                pl.lit(column.removesuffix("_us")).alias("metric"),
                col.count().alias("count"),
                us_mean(column).alias("mean_us"),
                col.median().alias("median_us"),
                us_sum(column).alias("sum_us"),
                col.min().alias("min_us"),
                col.max().alias("max_us"),
                (col < 0).sum().alias("negative"),
            )
        )
    schema = {"rank": pl.Int64, "metric": pl.String, "count": pl.UInt32, "mean_us": pl.Float64,
              "median_us": pl.Float64, "sum_us": pl.Float64, "min_us": pl.Float64, "max_us": pl.Float64,
              "negative": pl.UInt32}
    if stats.height == 0:
        return pl.DataFrame(schema=schema)
    return pl.concat(rows, how="vertical_relaxed").sort("rank", maintain_order=True)


def short_kernels(stats: pl.DataFrame, short_us: float = SHORT_LAUNCH_US) -> pl.DataFrame:
    """Kernels that run shorter than their launch call (a call of at most ``short_us``).

    Such kernels are launch-bound: the GPU finishes them faster than the host
    can issue the next, so fusing them or capturing a CUDA graph pays off.
    Graph launches are left out: their kernels are already in a graph.
    Columns: ``name, count, gpu_us, cpu_us, mean_gpu_us, mean_cpu_us``, most
    launch time first.
    """
    short = stats.filter(
        (pl.col("kernels") == 1)
        & (pl.col("cpu_duration_us") <= short_us)
        & (pl.col("gpu_duration_us") < pl.col("cpu_duration_us"))
    )
    return (
        short.group_by("name")
        .agg(
            pl.len().alias("count"),
            us_sum("gpu_duration_us").alias("gpu_us"),
            us_sum("cpu_duration_us").alias("cpu_us"),
            us_mean("gpu_duration_us").alias("mean_gpu_us"),
            us_mean("cpu_duration_us").alias("mean_cpu_us"),
        )
        .sort(["cpu_us", "name"], descending=[True, False])
    )


def multi_kernel_launches(stats: pl.DataFrame) -> pl.DataFrame:
    """Launch calls that released more than one activity, per API.

    CUDA/HIP graph launches; on MTIA, copies split into several DMA requests.

    Columns: ``rank, launch, launches, kernels`` (released in all),
    ``max_kernels`` (by one call), ``mean_cpu_us, mean_gpu_us`` (summed over
    the kernels of one call) ``, mean_delay_us``.
    """
    return (
        stats.filter(pl.col("kernels") > 1)
        .group_by("rank", "launch", maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("launches"),
            pl.col("kernels").sum(),
            pl.col("kernels").max().alias("max_kernels"),
            us_mean("cpu_duration_us").alias("mean_cpu_us"),
            us_mean("gpu_duration_us").alias("mean_gpu_us"),
            us_mean("launch_delay_us").alias("mean_delay_us"),
        )
        .sort("rank", "launch")
    )


def queue_length(trace: Trace, calls: Collection[str] | None = None) -> pl.DataFrame:
    """Outstanding launches per stream: ``rank, stream, ts`` (ns)``, queue_length``.

    One row per change: +1 when a launch call starts, -1 when its work starts
    on the GPU.  A graph launch counts once on each stream it released work
    on, until its first work there starts.  At equal times the enqueue comes
    first.  The value holds until the next row (a step function).  ``calls``
    as in :func:`launch_stats`.
    """
    return queue_length_of(stream_work(trace, LAUNCHED_COLUMNS), calls)


def queue_length_of(work: pl.DataFrame, calls: Collection[str] | None = None) -> pl.DataFrame:
    """:func:`queue_length` of stream work (:func:`launch_work`)."""
    work = (
        launched(work, calls)
        .group_by("launch_id", "stream", maintain_order=True)
        .agg(pl.col("rank", "launch_ts").first(), pl.col("ts").min())
    )
    changes = pl.concat([
        work.select("rank", "stream", pl.col("launch_ts").alias("ts"), pl.lit(1, pl.Int64).alias("delta")),
        work.select("rank", "stream", "ts", pl.lit(-1, pl.Int64).alias("delta")),
    ])
    return (
        changes.sort(["rank", "stream", "ts", "delta"], descending=[False, False, False, True])
        .with_columns(queue_length=pl.col("delta").cum_sum().over("rank", "stream"))
        .drop("delta")
    )


def queue_length_summary(trace: Trace, calls: Collection[str] | None = None) -> pl.DataFrame:
    """count, mean, std, min, quartiles and max of the queue length at each change, per stream."""
    return queue_length_summary_of(stream_work(trace, LAUNCHED_COLUMNS), calls)


def queue_length_summary_of(work: pl.DataFrame, calls: Collection[str] | None = None) -> pl.DataFrame:
    """:func:`queue_length_summary` of stream work (:func:`launch_work`)."""
    return describe(queue_length_of(work, calls), ["rank", "stream"], "queue_length")


def _copy_kind(name: pl.Expr) -> pl.Expr:
    """``Memset``, ``Memcpy HtoD`` / ``DtoH`` / ``DtoD`` / ..., or the name itself (MTIA's ``dma_request``)."""
    return (
        pl.when(name.str.starts_with("Memset")).then(pl.lit("Memset"))
        .when(name.str.starts_with("Memcpy")).then(name.str.slice(0, MEMCPY_KIND_CHARS))
        .otherwise(name)
    )


def memory_bandwidth(trace: Trace) -> pl.DataFrame:
    """Every memory operation with its bandwidth: ``rank, name, stream, ts, end`` (ns)``, bytes, memory_bw_gbps``.

    Bandwidth is GB/s: Kineto's own ``memory bandwidth (GB/s)`` where the
    trace has it (bytes over the exact ns duration: the written duration may
    be rounded to whole µs, off by up to 2x on short copies), else bytes per
    nanosecond of the written duration.  Operations without a byte count or
    a duration have a null bandwidth.
    """
    return memory_bandwidth_of(stream_work(trace))


def memory_bandwidth_of(work: pl.DataFrame) -> pl.DataFrame:
    """:func:`memory_bandwidth` of stream work (:func:`launch_work`)."""
    mem = work.filter(pl.col("kernel_type") == MEMORY)
    written = pl.col("memory_bw_gbps")
    own = pl.when((pl.col("dur") > 0) & (pl.col("bytes") >= 0)).then(pl.col("bytes") / pl.col("dur"))
    # Kineto writes 0 for a copy it timed at 0 ns: no bandwidth, not zero.
    kineto = pl.when((written > 0) | ((written == 0) & (pl.col("bytes") == 0))).then(written)
    bw = pl.coalesce(kineto, own)
    return mem.select("rank", _copy_kind(pl.col("name")).alias("name"), "stream", "ts", "end", "bytes", bw.alias("memory_bw_gbps"))


def memory_bw_summary(trace: Trace) -> pl.DataFrame:
    """Distribution of the summed bandwidth of each copy kind while it is non-zero.

    The bandwidths of running copies of one kind add up (+ at start, - at end);
    the statistics (count, mean, std, min, quartiles, max) are over the
    points where that sum changes to a positive value.  A copy is running
    over ``[ts, end)``: at one instant, copies ending leave before copies
    starting join (back-to-back copies, common once times are rounded to
    whole µs, never add up).  A copy written with no duration (under 1 µs
    in a whole-µs trace) whose bandwidth Kineto wrote is one point: its
    bandwidth plus that of the copies running then.
    """
    return memory_bw_summary_of(stream_work(trace))


def memory_bw_summary_of(work: pl.DataFrame) -> pl.DataFrame:
    """:func:`memory_bw_summary` of stream work (:func:`launch_work`)."""
    mem = memory_bandwidth_of(work).filter(pl.col("memory_bw_gbps").is_not_null())
    # Order at one instant: ends (0), starts (1), ends of copies with no duration (2).
    changes = pl.concat([
        mem.select("rank", "name", "ts", pl.col("memory_bw_gbps").alias("delta"), pl.lit(1).alias("order")),
        mem.select(
            "rank", "name", pl.col("end").alias("ts"), (-pl.col("memory_bw_gbps")).alias("delta"),
            pl.when(pl.col("end") > pl.col("ts")).then(0).otherwise(2).alias("order"),
        ),
    ])
    series = changes.sort(["rank", "name", "ts", "order"], maintain_order=True).with_columns(
        memory_bw_gbps=pl.col("delta").cum_sum().over("rank", "name")
    )
    return describe(series.filter(pl.col("memory_bw_gbps") > BW_RESIDUE_GBPS), ["rank", "name"], "memory_bw_gbps")
