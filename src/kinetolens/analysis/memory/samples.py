"""Memory sampled every N ops at capture time (``kinetolens.profile(sample_rate=N)``).

The allocator's ``[memory]`` events (``profile_memory=True``) record every
allocation; sampling records the memory in use every N dispatched ops,
cheaper and also meaningful where the allocator records nothing (a CPU run's
process RSS).  The samples are counter events named :data:`SAMPLE_EVENT`
whose ``cat`` says what was read (``cuda``: the caching allocator's
allocated and reserved bytes; ``cpu (process RSS)``: resident set size) and
whose ``op_index`` is the count of ops dispatched when it was taken.

Both functions read only ``trace.counters``; a trace without samples gives
empty tables.
"""

from __future__ import annotations

import polars as pl

from kinetolens.formats import MEMORY_SAMPLE_EVENT as SAMPLE_EVENT
from kinetolens.model.trace import Trace

SAMPLE_SCHEMA: dict[str, pl.DataType] = {
    "device": pl.String(),
    "pid": pl.Int64(),
    "ts": pl.Int64(),
    "op_index": pl.Int64(),
    "allocated": pl.Int64(),
    "reserved": pl.Int64(),
}

SUMMARY_SCHEMA: dict[str, pl.DataType] = {
    "device": pl.String(),
    "samples": pl.UInt32(),
    "every_n_ops": pl.Int64(),
    "ops": pl.Int64(),
    "min_allocated": pl.Int64(),
    "max_allocated": pl.Int64(),
    "peak_ts": pl.Int64(),
    "peak_reserved": pl.Int64(),
    "first_ts": pl.Int64(),
    "last_ts": pl.Int64(),
}


def memory_samples(trace: Trace) -> pl.DataFrame:
    """One row per sample, in time order per device: ``device, pid, ts, op_index, allocated, reserved``.

    ``reserved`` is null where only one figure was read (process RSS);
    ``op_index`` is null in traces written before it was recorded.
    """
    rows = trace.counters.filter(pl.col("name") == SAMPLE_EVENT)
    if rows.height == 0:
        return pl.DataFrame(schema=SAMPLE_SCHEMA)
    wide = rows.pivot(on="key", index=["event", "cat", "pid", "ts"], values="value", aggregate_function="first")
    for key in ("op_index", "allocated", "reserved"):
        if key not in wide.columns:
            wide = wide.with_columns(pl.lit(None, pl.Float64).alias(key))
    return (
        wide.sort("cat", "ts", "event")
        .select(
            pl.col("cat").fill_null("unknown").alias("device"),
            "pid",
            "ts",
            *(pl.col(k).round(0).cast(pl.Int64) for k in ("op_index", "allocated", "reserved")),
        )
        .filter(pl.col("allocated").is_not_null())
        .cast(SAMPLE_SCHEMA)  # type: ignore[arg-type]
    )


def sample_summary(samples: pl.DataFrame) -> pl.DataFrame:
    """Per device: how many samples, every how many ops, the smallest and largest reading and when.

    ``every_n_ops`` is the smallest step between consecutive ``op_index``
    values (every step is N, except across a window the profiler did not
    record, which is a multiple of N); with one sample it is that sample's
    ``op_index`` (the first sample is taken at op N).  ``ops`` is the last
    sample's ``op_index``: ops dispatched up to it, counted from the start of
    the profiled block.
    """
    if samples.height == 0:
        return pl.DataFrame(schema=SUMMARY_SCHEMA)
    step = pl.col("op_index").diff().over("device")
    summary = (
        samples.with_columns(_step=pl.when(step > 0).then(step))
        .group_by("device", maintain_order=True)
        .agg(
            samples=pl.len(),
            every_n_ops=pl.coalesce(pl.col("_step").min(), pl.col("op_index").first()),
            ops=pl.col("op_index").last(),
            min_allocated=pl.col("allocated").min(),
            max_allocated=pl.col("allocated").max(),
            peak_ts=pl.col("ts").sort_by("allocated", descending=True).first(),
            peak_reserved=pl.col("reserved").max(),
            first_ts=pl.col("ts").first(),
            last_ts=pl.col("ts").last(),
        )
    )
    return summary.cast(SUMMARY_SCHEMA)  # type: ignore[arg-type]


def sample_figure_curve(samples: pl.DataFrame) -> pl.DataFrame:
    """The samples in the shape of :func:`kinetolens.analysis.memory.usage.memory_curve`'s
    figure columns (``device, ts, op, allocated, reserved``), so
    ``views.figures.memory_figure`` draws them beside (or instead of) the
    allocator's curve; devices are labelled ``sampled <device>``."""
    return samples.select(
        ("sampled " + pl.col("device")).alias("device"),
        "ts",
        pl.lit(None, pl.String).alias("op"),
        "allocated",
        "reserved",
    )
