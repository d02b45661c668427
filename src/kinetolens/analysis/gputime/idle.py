"""Where the GPU timeline is busy, idle, and why it idles.

* :func:`temporal_breakdown`: over the span from the first GPU activity to
  the last, how much is covered by computation kernels, by other GPU work
  (memory copies, communication), and by nothing at all.
* :func:`kernel_type_breakdown` / :func:`kernel_breakdown`: time per kernel type
  and per kernel, with the time two types run at once shown on its own.
* :func:`idle_gaps` / :func:`idle_breakdown` / :func:`idle_gap_stats`: each gap
  between consecutive work on a stream, and whether the stream waited for the
  host (the next launch call had not even started), for the launch itself (a
  gap shorter than ``kernel_wait_us``), or for something else (events,
  other streams).
* :func:`comm_comp_overlap`: how much communication time hides behind compute.

All figures are computed from integer nanoseconds with interval unions (no
per-event loop) and presented in microseconds.
"""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.gputime.gpu_streams import (
    COMMUNICATION,
    COMPUTATION,
    KERNEL_TYPES,
    MEMORY,
    covered_ns,
    describe,
    rank_of,
    stream_times,
    stream_work,
    union_intervals,
)
from kinetolens.analysis.gputime.thresholds import KERNEL_WAIT_US
from kinetolens.model.ownership import owned_kernels
from kinetolens.model.trace import Trace

IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")

#: Types whose overlaps the kernel-type breakdown separates, in label order.
BREAKDOWN_TYPES = (COMPUTATION, COMMUNICATION, MEMORY)

NS_PER_US = 1000.0

#: The stream work every idle table reads (:func:`idle_work`).
IDLE_COLUMNS = ("rank", "stream", "kernel_type", "ts", "end", "launch_ts")


def idle_work(trace: Trace, own: tuple[int, int] | None = None) -> pl.DataFrame:
    """:func:`~kinetolens.analysis.gputime.gpu_streams.stream_work`'s
    :data:`IDLE_COLUMNS`, in start order, the kernel type as an enum (a byte
    where a name would take a dozen).  With ``own`` (``lo, hi`` ns), only the
    GPU activities that part of the trace owns
    (:func:`~kinetolens.model.ownership.owned_kernels`): the parts of a trace
    read a step window at a time, stacked and put in start order, are the
    whole trace's work."""
    work = stream_work(trace, IDLE_COLUMNS).with_columns(pl.col("kernel_type").cast(pl.Enum(KERNEL_TYPES)))
    return work if own is None else work.filter(owned_kernels(*own))


def idle_tables(work: pl.DataFrame, rank: int, kernel_wait_us: float = KERNEL_WAIT_US) -> dict[str, pl.DataFrame]:
    """Every table of ``kinetolens idle`` from :func:`idle_work` (of a trace,
    or of its windows stacked in start order) of the trace of ``rank``."""
    return {
        "temporal_breakdown": temporal_breakdown_of(work, rank),
        "kernel_types": kernel_type_breakdown_of(work),
        "idle_by_stream": idle_breakdown_of(work, kernel_wait_us),
        "idle_gap_stats": idle_gap_stats_of(work, kernel_wait_us),
        "comm_comp_overlap": comm_comp_overlap_of(work, rank),
    }


def _us(expr: pl.Expr) -> pl.Expr:
    return expr / NS_PER_US


def _pct(part: float, whole: float, digits: int = 2) -> float | None:
    return round(100.0 * part / whole, digits) if whole else None


def temporal_breakdown(trace: Trace) -> pl.DataFrame:
    """Idle / compute / non-compute time over the span of all GPU work.

    ``kernel_span_us`` runs from the first GPU activity's start to the last
    one's end.  ``idle_us`` is that span minus the union of all activity,
    ``compute_us`` the union of computation kernels, ``non_compute_us`` the
    rest of the busy time (memory, communication).  One row per rank; an empty
    frame for a trace without GPU work.
    """
    return temporal_breakdown_of(idle_work(trace), rank_of(trace))


def temporal_breakdown_of(work: pl.DataFrame, rank: int) -> pl.DataFrame:
    """:func:`temporal_breakdown` of :func:`idle_work` of the trace of ``rank``."""
    schema = {
        "rank": pl.Int64, "idle_us": pl.Float64, "compute_us": pl.Float64, "non_compute_us": pl.Float64,
        "kernel_span_us": pl.Float64, "idle_pct": pl.Float64, "compute_pct": pl.Float64, "non_compute_pct": pl.Float64,
    }
    if work.height == 0:
        return pl.DataFrame(schema=schema)
    busy = covered_ns(union_intervals(work))
    compute = covered_ns(union_intervals(work.filter(pl.col("kernel_type") == COMPUTATION)))
    span = int(work["end"].max()) - int(work["ts"].min())  # type: ignore[arg-type]
    idle = span - busy
    non_compute = busy - compute
    row = {
        "rank": rank,
        "idle_us": idle / NS_PER_US,
        "compute_us": compute / NS_PER_US,
        "non_compute_us": non_compute / NS_PER_US,
        "kernel_span_us": span / NS_PER_US,
        "idle_pct": _pct(idle, span),
        "compute_pct": _pct(compute, span),
        "non_compute_pct": _pct(non_compute, span),
    }
    return pl.DataFrame([row], schema=schema)


def _type_label(mask: pl.Expr) -> pl.Expr:
    """``COMPUTATION overlapping MEMORY``-style label of a bit mask of BREAKDOWN_TYPES."""
    parts = [pl.when((mask & (1 << i)) > 0).then(pl.lit(kind)) for i, kind in enumerate(BREAKDOWN_TYPES)]
    return pl.concat_str(parts, separator=" overlapping ", ignore_nulls=True)


def kernel_type_breakdown(trace: Trace) -> pl.DataFrame:
    """GPU time per kernel type, with time where types overlap counted apart.

    Each type's intervals are merged first, so two computation kernels on two
    streams count once; a moment where computation and memory both run is
    ``COMPUTATION overlapping MEMORY``, not either.  Columns: ``kernel_type,
    time_us, pct`` (of all typed GPU time), largest first.
    """
    return kernel_type_breakdown_of(idle_work(trace))


def kernel_type_breakdown_of(work: pl.DataFrame) -> pl.DataFrame:
    """:func:`kernel_type_breakdown` of :func:`idle_work`."""
    work = work.filter(pl.col("kernel_type").is_in(BREAKDOWN_TYPES))
    schema = {"kernel_type": pl.String, "time_us": pl.Float64, "pct": pl.Float64}
    if work.height == 0:
        return pl.DataFrame(schema=schema)
    bit = pl.lit(1, pl.Int64)
    for i, kind in enumerate(BREAKDOWN_TYPES):
        bit = pl.when(pl.col("kernel_type") == kind).then(pl.lit(1 << i, pl.Int64)).otherwise(bit)
    merged = union_intervals(work.with_columns(bit=bit), by=["bit"])
    edges = pl.concat([
        merged.select(pl.col("ts").alias("time"), pl.col("bit").alias("delta")),
        merged.select(pl.col("end").alias("time"), (-pl.col("bit")).alias("delta")),
    ]).sort("time", maintain_order=True)
    segments = edges.with_columns(
        mask=pl.col("delta").cum_sum(),
        dur=pl.col("time").shift(-1) - pl.col("time"),
    ).filter((pl.col("mask") > 0) & (pl.col("dur") > 0))
    table = (
        segments.group_by("mask")
        .agg(pl.col("dur").sum())
        .with_columns(kernel_type=_type_label(pl.col("mask")))
        .sort(["dur", "kernel_type"], descending=[True, False])
    )
    total = float(table["dur"].sum())
    return table.select(
        "kernel_type",
        _us(pl.col("dur")).alias("time_us"),
        (pl.col("dur") * 100.0 / total).alias("pct"),
    )


def kernel_breakdown(trace: Trace, duration_ratio: float = 0.8, num_kernels: int = 10) -> pl.DataFrame:
    """Per kernel type, the kernels that take most of its time; the rest as ``others``.

    Within a type, kernels are ranked by total time.  When there are more than
    ``num_kernels``, a kernel keeps its own row only if it is among the first
    ``num_kernels`` and the running total up to it does not pass the
    ``duration_ratio`` quantile of the running totals; the rest merge into
    ``others``, whose min/max/mean/std are over the merged kernels' totals.
    Columns: ``kernel_type, name, count, sum_us, max_us, min_us, mean_us, std_us``.
    """
    work = stream_work(trace).filter(pl.col("kernel_type").is_in(BREAKDOWN_TYPES))
    per_name = (
        work.group_by("kernel_type", "name")
        .agg(
            pl.len().alias("count"),
            pl.col("dur").sum().alias("sum"),
            pl.col("dur").max().alias("max"),
            pl.col("dur").min().alias("min"),
            pl.col("dur").mean().alias("mean"),
            pl.col("dur").std(ddof=1).fill_null(0.0).alias("std"),
        )
        .sort(["kernel_type", "sum", "name"], descending=[False, True, False])
        .with_columns(
            rank=pl.int_range(pl.len()).over("kernel_type"),
            n=pl.len().over("kernel_type"),
            running=pl.col("sum").cum_sum().over("kernel_type"),
        )
        .with_columns(cut=pl.col("running").quantile(duration_ratio, "linear").over("kernel_type"))
    )
    lumped = (pl.col("n") > num_kernels) & ((pl.col("running") > pl.col("cut")) | (pl.col("rank") >= num_kernels))
    kept = per_name.filter(~lumped)
    others = (
        per_name.filter(lumped)
        .group_by("kernel_type")
        .agg(
            pl.lit("others").alias("name"),
            pl.col("count").sum(),
            pl.col("sum").max().alias("max"),
            pl.col("sum").min().alias("min"),
            pl.col("sum").mean().alias("mean"),
            pl.col("sum").std(ddof=1).fill_null(0.0).alias("std"),
            pl.col("sum").sum(),
        )
    )
    cols = ["kernel_type", "name", "count", "sum", "max", "min", "mean", "std"]
    table = pl.concat([kept.select(cols), others.select(cols)], how="vertical_relaxed")
    return table.sort(["kernel_type", "sum"], descending=[False, True]).select(
        "kernel_type",
        "name",
        "count",
        *(_us(pl.col(c).cast(pl.Float64)).alias(f"{c}_us") for c in ("sum", "max", "min", "mean", "std")),
    )


def idle_gaps(trace: Trace, kernel_wait_us: float = KERNEL_WAIT_US) -> pl.DataFrame:
    """Every gap between consecutive GPU work on a stream, with its cause.

    Columns: ``rank, stream, ts`` (ns, where the next work starts)``, gap_ns,
    idle_category``.  A gap is ``host_wait`` when the next work's launch call
    began after the previous work had ended (the host was late),
    ``kernel_wait`` when it is shorter than ``kernel_wait_us`` (launch
    overhead between queued work), else ``other``.

    Work that starts before everything earlier on its stream has ended
    (kernels overlapping on one stream, as Blackwell's programmatic
    dependent launch lets them) leaves no gap: the gap is measured from the
    latest end so far, and an overlap is not a gap (never negative idle).
    """
    return idle_gaps_of(stream_times(trace), kernel_wait_us)  # the gaps need no kernel types


def idle_gaps_of(work: pl.DataFrame, kernel_wait_us: float = KERNEL_WAIT_US) -> pl.DataFrame:
    """:func:`idle_gaps` of stream work with ``rank, stream, ts, end, launch_ts`` (:func:`idle_work`)."""
    work = work.sort(["stream", "ts"], maintain_order=True)
    prev_end = pl.col("end").cum_max().shift(1).over("stream")
    gaps = work.with_columns(prev_end=prev_end).filter(
        pl.col("prev_end").is_not_null() & (pl.col("ts") >= pl.col("prev_end"))
    )
    gap = pl.col("ts") - pl.col("prev_end")
    category = (
        pl.when(pl.col("launch_ts") > pl.col("prev_end")).then(pl.lit("host_wait"))
        .when(gap < kernel_wait_us * NS_PER_US).then(pl.lit("kernel_wait"))
        .otherwise(pl.lit("other"))
    )
    return gaps.select("rank", "stream", "ts", gap.alias("gap_ns"), category.alias("idle_category"))


def _all_categories(trace_streams: pl.DataFrame) -> pl.DataFrame:
    return trace_streams.join(pl.DataFrame({"idle_category": list(IDLE_CATEGORIES)}), how="cross")


def idle_breakdown(trace: Trace, kernel_wait_us: float = KERNEL_WAIT_US) -> pl.DataFrame:
    """Idle time per stream and cause: ``rank, stream, idle_category, idle_us, idle_ratio``.

    ``idle_ratio`` is the share of the stream's idle time; every stream has a
    row for each of ``host_wait``, ``kernel_wait`` and ``other``.
    """
    return idle_breakdown_of(stream_times(trace), kernel_wait_us)  # the gaps need no kernel types


def idle_breakdown_of(work: pl.DataFrame, kernel_wait_us: float = KERNEL_WAIT_US) -> pl.DataFrame:
    """:func:`idle_breakdown` of stream work with ``rank, stream, ts, end, launch_ts`` (:func:`idle_work`)."""
    gaps = idle_gaps_of(work, kernel_wait_us)
    streams = work.select("rank", "stream").unique().sort("stream")
    sums = gaps.group_by("rank", "stream", "idle_category").agg(pl.col("gap_ns").sum())
    table = (
        _all_categories(streams)
        .join(sums, on=["rank", "stream", "idle_category"], how="left")
        .with_columns(pl.col("gap_ns").fill_null(0))
        .with_columns(total=pl.col("gap_ns").sum().over("rank", "stream"))
    )
    ratio = pl.when(pl.col("total") != 0).then(pl.col("gap_ns") / pl.col("total"))
    return table.select(
        "rank", "stream", "idle_category", _us(pl.col("gap_ns")).alias("idle_us"), ratio.alias("idle_ratio")
    )


def idle_gap_stats(trace: Trace, kernel_wait_us: float = KERNEL_WAIT_US) -> pl.DataFrame:
    """Distribution of gap lengths (µs) per stream and cause: count, mean, std, min, quartiles, max."""
    return idle_gap_stats_of(stream_times(trace), kernel_wait_us)  # the gaps need no kernel types


def idle_gap_stats_of(work: pl.DataFrame, kernel_wait_us: float = KERNEL_WAIT_US) -> pl.DataFrame:
    """:func:`idle_gap_stats` of stream work with ``rank, stream, ts, end, launch_ts`` (:func:`idle_work`)."""
    gaps = idle_gaps_of(work, kernel_wait_us).with_columns(gap_us=_us(pl.col("gap_ns")))
    streams = work.select("rank", "stream").unique()
    stats = describe(gaps, ["rank", "stream", "idle_category"], "gap_us")
    return (
        _all_categories(streams)
        .join(stats, on=["rank", "stream", "idle_category"], how="left")
        .with_columns(pl.col("count").fill_null(0))
        .sort("rank", "stream", "idle_category")
    )


def comm_comp_overlap(trace: Trace) -> pl.DataFrame:
    """Communication time and how much of it runs while computation runs.

    Columns: ``rank, comm_us, overlap_us, overlap_pct`` (null without
    communication kernels).
    """
    return comm_comp_overlap_of(idle_work(trace), rank_of(trace))


def comm_comp_overlap_of(work: pl.DataFrame, rank: int) -> pl.DataFrame:
    """:func:`comm_comp_overlap` of :func:`idle_work` of the trace of ``rank``."""
    comm, comp = (union_intervals(work.filter(pl.col("kernel_type") == kind)) for kind in (COMMUNICATION, COMPUTATION))
    overlap = _intersection_ns(comm, comp)
    comm_ns = covered_ns(comm)
    return pl.DataFrame(
        [{
            "rank": rank,
            "comm_us": comm_ns / NS_PER_US,
            "overlap_us": overlap / NS_PER_US,
            "overlap_pct": _pct(overlap, comm_ns),
        }],
        schema={"rank": pl.Int64, "comm_us": pl.Float64, "overlap_us": pl.Float64, "overlap_pct": pl.Float64},
    )


def _intersection_ns(a: pl.DataFrame, b: pl.DataFrame) -> int:
    """Length of the intersection of two sets of disjoint intervals (a sweep over their edges)."""
    if a.height == 0 or b.height == 0:
        return 0
    edges = pl.concat([
        a.select(pl.col("ts").alias("time"), pl.lit(1).alias("delta")),
        a.select(pl.col("end").alias("time"), pl.lit(-1).alias("delta")),
        b.select(pl.col("ts").alias("time"), pl.lit(1).alias("delta")),
        b.select(pl.col("end").alias("time"), pl.lit(-1).alias("delta")),
    ]).sort("time")
    both = edges.with_columns(
        depth=pl.col("delta").cum_sum(), dur=pl.col("time").shift(-1) - pl.col("time")
    ).filter(pl.col("depth") == 2)
    return int(both["dur"].sum())
