"""Per-GPU figures for the overview: how busy each GPU was during the steps.

All figures are over the same time span as the step breakdown, from the
first step's start to the last step's end (:func:`overview.step_windows`),
so kernels before or after the profiled steps do not dilute them.

* ``utilization``: fraction of the span in which at least one kernel ran
  (union of kernel intervals; memcpy/memset are not kernels).
* ``sm_efficiency``: estimated fraction of SMs busy, averaged over the span.
  A kernel with ``blocks per SM`` = b keeps min(b, 1) of the SMs busy;
  concurrent kernels add up, capped at 1.  An estimate: it assumes blocks
  spread evenly and take the kernel's whole duration.
* ``occupancy``: the profiler's estimated achieved occupancy per kernel
  (fraction of the SM's maximum resident warps), averaged weighted by kernel
  time inside the span.  Older Kineto traces record only the theoretical
  occupancy; the model falls back to it, an upper bound of the achieved one.
* ``tensor_core_share``: fraction of the device's kernel time (whole trace)
  in kernels that use Tensor Cores (:func:`tensor_cores.kernel_tensor_cores`:
  measured counters, else kernel-name rules); kernels neither rule can
  classify count as not using them, so it is a lower bound; null when no
  kernel on the device could be classified.
* ``peak_allocated_bytes``, ``peak_basis``, ``live_at_start_bytes``: the
  memory view's peak on that device (:func:`memory.peak_memory`; needs
  ``profile_memory=True``), what it covers, and the bytes alive when the
  profiling window opened.

These are torch-tb-profiler's Overview "GPU Summary" definitions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from kinetolens.analysis.gputime.gpu_streams import union_intervals
from kinetolens.analysis.gputime.overview import step_windows
from kinetolens.analysis.hardware.tensor_cores import kernel_tensor_cores
from kinetolens.model.devices import device_name, device_properties
from kinetolens.analysis.memory.usage import CPU_DEVICE_TYPE, peak_memory
from kinetolens.analysis.session import per_trace
from kinetolens.model.trace import Trace

SCHEMA = {
    "device": pl.Int64,
    #: The GPU's recorded name, or the model its recorded properties identify (:mod:`kinetolens.model.devices`).
    "name": pl.String,
    "utilization": pl.Float64,
    "sm_efficiency": pl.Float64,
    "occupancy": pl.Float64,
    "tensor_core_share": pl.Float64,
    "peak_allocated_bytes": pl.Int64,
    "peak_basis": pl.String,
    "live_at_start_bytes": pl.Int64,
}


def metrics_span(trace: Trace) -> tuple[int, int] | None:
    """[first step start, last step end) in ns, or None without a span."""
    windows = step_windows(trace)
    return steps_span(windows) if windows.height else None


def steps_span(steps: pl.DataFrame) -> tuple[int, int]:
    """From the first step's start to the last one's end (ns) of a table of
    steps or their windows (``start``, ``end``): the span the figures are over."""
    return int(steps["start"].min()), int(steps["end"].max())  # type: ignore[arg-type]


def _kernels(trace: Trace) -> pl.DataFrame:
    # The columns first: a filter copies every column it keeps, and the kernels table is wide.
    k = trace.kernels.select("kind", "device", "ts", "dur", "blocks_per_sm", "occupancy")
    return k.filter((pl.col("kind").cast(pl.String) == "kernel") & pl.col("device").is_not_null()).select(
        "device", "ts", "dur", "blocks_per_sm", "occupancy", end=pl.col("ts") + pl.col("dur")
    )


def _clipped(start: pl.Expr, end: pl.Expr, lo: int, hi: int) -> pl.Expr:
    """Length of [start, end) inside [lo, hi), zero when outside."""
    return (pl.min_horizontal(end, pl.lit(hi)) - pl.max_horizontal(start, pl.lit(lo))).clip(lower_bound=0)


def _busy(k: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """Busy time per device in [lo, hi) (ns): the union of kernel intervals."""
    merged = union_intervals(k, by=["device"])
    return merged.group_by("device").agg(busy_ns=_clipped(pl.col("ts"), pl.col("end"), lo, hi).sum().cast(pl.Float64))


def _sm_busy(k: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """Sweep per device: summed blocks-per-SM of running kernels, capped at 1, times how long (ns in [lo, hi)).

    Numpy over the sorted start and end points (a grouped polars sweep with
    window sums held a hash table per group: 130 MiB on a 500 MB trace)."""
    valued = k.filter(pl.col("blocks_per_sm") > 0)
    if valued.height == 0:
        return pl.DataFrame(schema={"device": k.schema["device"], "sm_busy_ns": pl.Float64})
    devices, codes = np.unique(valued["device"].to_numpy(), return_inverse=True)
    value = valued["blocks_per_sm"].to_numpy().astype(np.float64)
    dev = np.concatenate([codes, codes])
    t = np.concatenate([valued["ts"].to_numpy(), valued["end"].to_numpy()])
    v = np.concatenate([value, -value])
    order = np.lexsort((t, dev))
    dev, t, v = dev[order], t[order], v[order]
    # One point per device and time: the change summed there, then the level from it on.
    first = np.flatnonzero(np.append(True, (dev[1:] != dev[:-1]) | (t[1:] != t[:-1])))
    change = np.add.reduceat(v, first)
    dev, t = dev[first], t[first]
    device_start = np.flatnonzero(np.append(True, dev[1:] != dev[:-1]))
    running = np.cumsum(change)
    level = running - np.repeat(running[device_start] - change[device_start], np.diff(np.append(device_start, dev.size)))
    # Each level holds until the device's next point; the last point of a device ends it.
    same = np.append(dev[1:] == dev[:-1], False)
    nxt = np.append(t[1:], 0)
    # Float running sums leave tiny residues where nothing runs: treat as idle.
    busy = np.where(level > 1e-9, np.minimum(level, 1.0), 0.0)
    held = np.clip(np.minimum(nxt, hi) - np.maximum(t, lo), 0, None)
    weighted = np.where(same, busy * held, 0.0)
    total = np.bincount(dev, weights=weighted, minlength=devices.size)
    timed = np.bincount(dev, weights=same, minlength=devices.size) > 0  # a device whose kernels all took no time has no level
    out = pl.DataFrame({"device": devices[timed], "sm_busy_ns": total[timed]})
    return out.cast({"device": k.schema["device"]})


def _occupancy(k: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """Occupancy (%) times kernel time in [lo, hi), and that time, per device."""
    inside = k.filter(pl.col("occupancy") >= 0).with_columns(w=_clipped(pl.col("ts"), pl.col("end"), lo, hi))
    inside = inside.filter(pl.col("w") > 0)
    return inside.group_by("device").agg(
        occupancy_ns=(pl.col("occupancy") * pl.col("w")).sum().cast(pl.Float64), occupied_ns=pl.col("w").sum().cast(pl.Float64)
    )


def gpu_peaks(peaks: pl.DataFrame) -> pl.DataFrame:
    """The memory view's peaks (:func:`memory.peak_memory`, the one definition) of the GPUs, in this table's columns."""
    peaks = peaks.filter((pl.col("device_type") != CPU_DEVICE_TYPE) & (pl.col("device_id") >= 0))
    return peaks.select(
        device="device_id", peak_allocated_bytes="peak_allocated", peak_basis="basis", live_at_start_bytes="live_at_start"
    )


def _tensor_core_time(trace: Trace, owned: pl.Expr | None) -> pl.DataFrame:
    """Per device: kernel time in kernels that use Tensor Cores, all kernel time,
    and whether any kernel could be classified (of the kernels ``owned`` selects)."""
    verdicts = kernel_tensor_cores(trace).select("kernel_id", "tc")
    k = trace.kernels.select("kind", "kernel_id", "device", "ts", "launch_ts", "dur").filter(pl.col("kind").cast(pl.String) == "kernel").drop("kind")
    k = k if owned is None else k.filter(owned)
    k = k.join(verdicts, on="kernel_id", how="left").filter(pl.col("device").is_not_null())
    dur = pl.col("dur").cast(pl.Float64)
    return k.group_by("device").agg(
        tensor_core_ns=dur.filter(pl.col("tc") == "yes").sum(),
        kernel_ns=dur.sum(),
        classified=(pl.col("tc").fill_null("unknown") != "unknown").any(),
    )


#: Per device, the sums the figures are ratios of (ns, or ns weighted): the
#: parts of a trace (:mod:`kinetolens.windowed`) add up to the whole trace's.
PARTS_SCHEMA = {
    "device": pl.Int64,
    "busy_ns": pl.Float64,
    "sm_busy_ns": pl.Float64,
    "occupancy_ns": pl.Float64,
    "occupied_ns": pl.Float64,
    "tensor_core_ns": pl.Float64,
    "kernel_ns": pl.Float64,
    "classified": pl.Boolean,
}


def gpu_time_parts(trace: Trace, lo: int, hi: int, owned: pl.Expr | None = None) -> pl.DataFrame:
    """:data:`PARTS_SCHEMA` per device: busy, SM-busy and occupancy sums over
    ``[lo, hi)``, Tensor Core time over the kernels ``owned`` selects (default all).
    A sum is null where the device has nothing to sum (its figure is then null)."""
    k = _kernels(trace)
    frames = [_busy(k, lo, hi), _sm_busy(k, lo, hi), _occupancy(k, lo, hi)] if hi > lo and k.height else []
    frames.append(_tensor_core_time(trace, owned))
    out = pl.concat([k.select("device").unique(), *[f.select("device") for f in frames]]).unique()
    for frame in frames:
        out = out.join(frame, on="device", how="left")
    for name, dtype in PARTS_SCHEMA.items():
        if name not in out.columns:
            out = out.with_columns(pl.lit(None, dtype).alias(name))
    return out.select(list(PARTS_SCHEMA)).cast(PARTS_SCHEMA)


def added_parts(parts: pl.DataFrame) -> pl.DataFrame:
    """Several traces' (or windows') :func:`gpu_time_parts` added per device (a null stays null only where every part's is)."""
    sums = [
        pl.when(pl.col(c).is_not_null().any()).then(pl.col(c).sum()).alias(c)
        for c in PARTS_SCHEMA
        if c not in ("device", "classified")
    ]
    return parts.group_by("device").agg(*sums, pl.col("classified").any()).select(list(PARTS_SCHEMA))


def figures(parts: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """The per-device figures of :func:`gpu_metrics` from their sums over ``[lo, hi)``."""
    span = float(hi - lo)
    return parts.select(
        "device",
        utilization=pl.col("busy_ns") / span if span > 0 else pl.lit(None, pl.Float64),
        sm_efficiency=pl.col("sm_busy_ns") / span if span > 0 else pl.lit(None, pl.Float64),
        occupancy=pl.col("occupancy_ns") / pl.col("occupied_ns") / 100.0,
        tensor_core_share=pl.when(pl.col("classified")).then(pl.col("tensor_core_ns") / pl.col("kernel_ns")),
    )


@per_trace
def gpu_metrics(trace: Trace) -> pl.DataFrame:
    """One row per GPU that ran kernels or holds memory records."""
    span = metrics_span(trace)
    lo, hi = span if span is not None else (0, 0)
    return gpu_table(figures(gpu_time_parts(trace, lo, hi), lo, hi), gpu_peaks(peak_memory(trace)), trace.devices)


def gpu_table(figures: pl.DataFrame, peaks: pl.DataFrame, devices: list[dict[str, Any]]) -> pl.DataFrame:
    """:data:`SCHEMA` from the figures (:func:`figures`), the memory peaks per GPU and the listed devices."""
    out = pl.concat([figures.select("device"), peaks.select("device")]).unique()
    for frame in (figures, peaks):
        out = out.join(frame, on="device", how="left")
    ids = out["device"].to_list()
    out = out.with_columns(name=pl.Series([device_name(device_properties(devices, d)) for d in ids], dtype=pl.String))
    for name, dtype in SCHEMA.items():
        if name not in out.columns:
            out = out.with_columns(pl.lit(None, dtype).alias(name))
    return out.select(list(SCHEMA)).cast(SCHEMA).sort("device")
