"""CUPTI PM-sampling counters: samples of the GPU's counters over time, and
what each kernel saw.

Where torch's Kineto has no CUPTI range profiler (which measures counters per
kernel by replaying each one), it samples the GPU's performance monitors
instead: every millisecond, each metric's value over the interval, written as
counter events on a ``GPU N Counters`` track (category ``hardware_counters``).
A sample is not tied to a kernel, so:

* per interval, :func:`pm_samples` gives each sample with its time span (a
  sample lasts until the metric's next sample; the last one lasts the
  metric's median interval, since Kineto writes only where each starts);
* per kernel, :func:`pm_per_kernel` weighs the samples a kernel overlaps by
  the overlap, so a kernel inside one sample gets that sample's value and a
  long kernel the time-weighted mean of its samples; ``covered`` says how much
  of the kernel's time had a sample at all.  Several kernels running in one
  sample share its value: the value is the GPU's over the interval, not the
  kernel's own, which the table's notes say;
* :func:`pm_by_kernel_name` sums that per kernel name, weighted by time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kinetolens.ingest.categories import KERNEL
from kinetolens.model.trace import Trace
from kinetolens.registry.trace_names import HARDWARE_COUNTERS_CAT


class NoSamples(Exception):
    """The trace has no CUPTI PM-sampling counter events."""


SAMPLE_SCHEMA = {"device": pl.Int64, "metric": pl.String, "ts": pl.Int64, "end": pl.Int64, "value": pl.Float64}


def has_pm_samples(trace: Trace) -> bool:
    """True when the trace has PM-sampling counter events."""
    counters = trace.counters
    return counters.height > 0 and bool((counters["cat"] == HARDWARE_COUNTERS_CAT).any())


def pm_samples(trace: Trace) -> pl.DataFrame:
    """Each PM sample: ``device, metric, ts, end, value`` (ns), by device,
    metric and time.  A sample ends where the metric's next one starts on that
    GPU; the last one lasts the metric's median interval (one sample alone, no
    time: ``end == ts``)."""
    rows = trace.counters.filter(pl.col("cat") == HARDWARE_COUNTERS_CAT)
    if rows.height == 0:
        return pl.DataFrame(schema=SAMPLE_SCHEMA)
    samples = (
        rows.select(pl.col("device").fill_null(-1), pl.col("name").alias("metric"), "ts", "value")
        .filter(pl.col("ts").is_not_null())
        .sort("device", "metric", "ts")
    )
    series = ["device", "metric"]
    samples = samples.with_columns(next_ts=pl.col("ts").shift(-1).over(series))
    interval = (pl.col("next_ts") - pl.col("ts")).median().over(series)
    end = pl.coalesce(pl.col("next_ts"), pl.col("ts") + interval.fill_null(0).cast(pl.Int64))
    return samples.select(
        pl.when(pl.col("device") >= 0).then(pl.col("device")).alias("device"), "metric", "ts", end.alias("end"), "value"
    ).cast(SAMPLE_SCHEMA)


@dataclass(frozen=True)
class SampleInfo:
    """What was sampled: for the one line a view prints."""

    devices: tuple[int | None, ...]
    metrics: tuple[str, ...]
    samples: int  #: samples of one metric (the most any metric has)
    interval_ns: int | None  #: the median time between a metric's samples
    span_ns: int


def sample_info(samples: pl.DataFrame) -> SampleInfo:
    if samples.height == 0:
        return SampleInfo((), (), 0, None, 0)
    per_series = samples.group_by("device", "metric").agg(n=pl.len(), step=(pl.col("ts").diff()).median())
    step = per_series["step"].median()
    return SampleInfo(
        devices=tuple(sorted(set(samples["device"].to_list()), key=lambda d: (d is None, d))),
        metrics=tuple(sorted(set(samples["metric"].to_list()))),
        samples=int(per_series["n"].max()),
        interval_ns=None if step is None else int(step),
        span_ns=int(samples["end"].max() - samples["ts"].min()),
    )


def _overlaps(k_ts: np.ndarray, k_end: np.ndarray, s_ts: np.ndarray, s_end: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every (kernel, sample) pair that overlaps in time, with the overlap.

    Samples of one series are sorted and do not overlap each other, so the
    samples a kernel overlaps are one contiguous run: from the first that ends
    after the kernel starts to the last that starts before it ends."""
    first = np.searchsorted(s_end, k_ts, side="right")
    last = np.searchsorted(s_ts, k_end, side="left")
    counts = np.maximum(last - first, 0)
    kernel = np.repeat(np.arange(k_ts.size), counts)
    offset = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    sample = np.repeat(first, counts) + offset
    overlap = np.minimum(k_end[kernel], s_end[sample]) - np.maximum(k_ts[kernel], s_ts[sample])
    return kernel, sample, overlap


def pm_per_kernel(trace: Trace) -> pl.DataFrame:
    """For each kernel on a sampled GPU: ``kernel_id, name, device, ts, dur,
    covered`` (ns of the kernel with a sample) and one column per metric, the
    overlap-weighted mean of that metric's samples during the kernel (null
    where none overlaps).  Raises :class:`NoSamples` without samples."""
    samples = pm_samples(trace)
    if samples.height == 0:
        raise NoSamples(
            "no CUPTI PM-sampling counters in this trace: kinetolens.profile(counters=[...]) records them "
            "where torch's Kineto samples counters instead of measuring them per kernel"
        )
    kernels = trace.kernels.filter(pl.col("kind") == KERNEL).select(
        "kernel_id", "name", "device", "ts", "dur"
    ).sort("ts")
    metrics = sorted(set(samples["metric"].to_list()))
    parts = []
    for (device, metric), series in samples.partition_by("device", "metric", as_dict=True, maintain_order=True).items():
        on_gpu = kernels if device is None else kernels.filter(pl.col("device") == device)
        k_ts = on_gpu["ts"].to_numpy()
        k_end = k_ts + on_gpu["dur"].fill_null(0).to_numpy()
        s_ts, s_end, s_value = (series[c].to_numpy() for c in ("ts", "end", "value"))
        kernel, sample, overlap = _overlaps(k_ts, k_end, s_ts, s_end)
        weight = np.bincount(kernel, overlap, minlength=k_ts.size).astype(np.float64)
        total = np.bincount(kernel, overlap * s_value[sample], minlength=k_ts.size)
        seen = weight > 0
        parts.append(
            pl.DataFrame(
                {
                    "kernel_id": on_gpu["kernel_id"].to_numpy()[seen],
                    "metric": np.full(int(seen.sum()), metric, dtype=object),
                    "value": total[seen] / weight[seen],
                    "weight": weight[seen],
                },
                schema={"kernel_id": pl.Int64, "metric": pl.String, "value": pl.Float64, "weight": pl.Float64},
            )
        )
    long = pl.concat(parts)
    covered = long.group_by("kernel_id").agg(covered=pl.col("weight").max().cast(pl.Int64))
    wide = long.pivot(on="metric", index="kernel_id", values="value", aggregate_function="first")
    for metric in metrics:
        if metric not in wide.columns:
            wide = wide.with_columns(pl.lit(None, pl.Float64).alias(metric))
    return (
        kernels.join(covered, on="kernel_id", how="inner")
        .join(wide, on="kernel_id", how="left")
        .select("kernel_id", "name", "device", "ts", "dur", "covered", *metrics)
        .sort("ts", "kernel_id")
    )


def pm_by_kernel_name(per_kernel: pl.DataFrame) -> pl.DataFrame:
    """:func:`pm_per_kernel` per kernel name, most GPU time first: ``name,
    kernels, time_us, covered_pct`` (of that time, how much had a sample) and
    each metric's mean weighted by the time each kernel had a sample."""
    metrics = [c for c in per_kernel.columns if c not in ("kernel_id", "name", "device", "ts", "dur", "covered")]
    weighted = [
        ((pl.col(m) * pl.col("covered")).sum() / pl.col("covered").filter(pl.col(m).is_not_null()).sum()).alias(m)
        for m in metrics
    ]
    return (
        per_kernel.group_by("name")
        .agg(kernels=pl.len(), time=pl.col("dur").sum(), covered=pl.col("covered").sum(), *weighted)
        .sort(["time", "name"], descending=[True, False])
        .select(
            "name",
            "kernels",
            (pl.col("time") / 1e3).alias("time_us"),
            pl.when(pl.col("time") > 0).then(100.0 * pl.col("covered") / pl.col("time")).alias("covered_pct"),
            *metrics,
        )
    )
