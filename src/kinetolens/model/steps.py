"""Profiler steps: ``ProfilerStep#N`` ranges, extended over their GPU work.

A step's CPU range ends when the host has launched everything, but its
kernels may still run afterwards.  As torch-tb-profiler does, a step ends at
the later of its CPU end and the end of the last GPU activity it launched, so
step time is what the step really took.
"""

from __future__ import annotations

import polars as pl

STEP_PREFIX = "ProfilerStep#"


def build_steps(ops: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    marks = (
        ops.filter(pl.col("name").str.starts_with(STEP_PREFIX))
        .select(
            step=pl.col("name").str.slice(len(STEP_PREFIX)).cast(pl.Int64, strict=False),
            name="name",
            step_op_id="op_id",
            ts="ts",
            cpu_end="end",
        )
        .filter(pl.col("step").is_not_null())
        .sort("ts")
        .unique(subset=["step"], keep="first", maintain_order=True)
    )
    if marks.height == 0:
        return marks.with_columns(gpu_end=pl.lit(None, pl.Int64), end=pl.col("cpu_end"), dur=pl.lit(0, pl.Int64))
    # GPU work launched inside each step: kernels whose launch falls in the CPU range.
    starts = marks.select("step", "ts", "cpu_end")
    launched = (
        kernels.filter(pl.col("launch_ts").is_not_null())
        .select("launch_ts", kend=pl.col("ts") + pl.col("dur"))
        .sort("launch_ts")
        .join_asof(starts.sort("ts"), left_on="launch_ts", right_on="ts", strategy="backward")
        .filter(pl.col("launch_ts") < pl.col("cpu_end"))
        .group_by("step")
        .agg(gpu_end=pl.col("kend").max())
    )
    steps = marks.join(launched, on="step", how="left").with_columns(
        end=pl.max_horizontal("cpu_end", "gpu_end")
    )
    return steps.with_columns(dur=pl.col("end") - pl.col("ts")).sort("ts")


def assign_steps(
    steps: pl.DataFrame, ops: pl.DataFrame, runtime: pl.DataFrame, kernels: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Give every op, launch and kernel the step it belongs to (or null)."""
    if steps.height == 0:
        null = pl.lit(None, pl.Int64).alias("step")
        return ops.with_columns(null), runtime.with_columns(null), kernels.with_columns(null)
    ranges = steps.select("step", step_ts="ts", step_cpu_end="cpu_end", step_end="end").sort("step_ts")

    # Only the time columns are sorted and joined; the step column is then
    # attached to the wide tables in their own order.  Sorting and joining
    # the wide tables themselves would copy every column of them twice.
    def step_of(times: pl.DataFrame, keep: pl.Expr) -> pl.Series:
        keyed = (
            times.with_row_index("_row")
            .sort("_t")
            .join_asof(ranges, left_on="_t", right_on="step_ts", strategy="backward")
            .sort("_row")
        )
        return keyed.select(step=pl.when(keep).then(pl.col("step")))["step"]

    host_end = pl.col("_t") < pl.col("step_cpu_end")
    ops = ops.with_columns(step_of(ops.select(_t="ts"), host_end))
    runtime = runtime.with_columns(step_of(runtime.select(_t="ts"), host_end))
    # Kernels belong to the step that launched them; unlaunched ones by time.
    launched = pl.col("launch_ts").is_not_null()
    kernel_times = kernels.select("launch_ts", _t=pl.col("launch_ts").fill_null(pl.col("ts")))
    kernels = kernels.with_columns(
        step_of(kernel_times, (launched & host_end) | (~launched & (pl.col("_t") < pl.col("step_end"))))
    )
    return ops, runtime, kernels
