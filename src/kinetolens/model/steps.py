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

    def by_time(frame: pl.DataFrame, col: str, end_col: str) -> pl.DataFrame:
        keyed = frame.with_columns(pl.col(col).alias("_t")).sort("_t").join_asof(
            ranges, left_on="_t", right_on="step_ts", strategy="backward"
        )
        keyed = keyed.with_columns(
            step=pl.when(pl.col("_t") < pl.col(end_col)).then(pl.col("step"))
        )
        return keyed.drop("_t", "step_ts", "step_cpu_end", "step_end")

    ops = by_time(ops, "ts", "step_cpu_end").sort("op_id")
    runtime = by_time(runtime, "ts", "step_cpu_end").sort("launch_id")
    # Kernels belong to the step that launched them; unlaunched ones by time.
    kernels = kernels.with_columns(pl.col("launch_ts").fill_null(pl.col("ts")).alias("_t")).sort("_t")
    kernels = kernels.join_asof(ranges, left_on="_t", right_on="step_ts", strategy="backward")
    kernels = kernels.with_columns(
        step=pl.when(
            (pl.col("launch_ts").is_not_null() & (pl.col("_t") < pl.col("step_cpu_end")))
            | (pl.col("launch_ts").is_null() & (pl.col("_t") < pl.col("step_end")))
        ).then(pl.col("step"))
    ).drop("_t", "step_ts", "step_cpu_end", "step_end").sort("kernel_id")
    return ops, runtime, kernels
