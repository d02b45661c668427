"""``nn.DataParallel`` instead of DistributedDataParallel."""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.advice.rule_context import (
    NS_PER_MS,
    RuleContext,
)
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.finding import Finding

#: A module path component of ``nn.DataParallel`` (not DistributedDataParallel).
DATA_PARALLEL_MODULE = r"(?:^|\.)(DataParallel_\d+)(?:\.|$)"


@rule(requires=("pytorch",), training_only=True)
def data_parallel(ctx: RuleContext) -> list[Finding]:
    """``nn.DataParallel`` in the module paths: one process drives every GPU.

    Each step it copies the weights to every GPU, scatters the batch,
    gathers the outputs and reduces the gradients on device 0, all from one
    Python process whose replica threads share the GIL.  Its own work shows
    as host time spent in the DataParallel module itself, outside the
    wrapped model: that is the saving counted (DDP has none of it); the
    GIL contention it also removes is not counted.
    """
    ops = ctx.trace.ops
    if ops.height == 0:
        return []
    wrapper = ops["module"].str.extract(DATA_PARALLEL_MODULE, 1)
    if wrapper.null_count() == ops.height:
        return []
    name = wrapper.drop_nulls().mode().sort()[0]
    # Self time of the outermost ranges in the wrapper's own module path
    # (DataParallel.forward and the scatter/replicate/gather it runs): their
    # duration less that of their direct children.
    own = ops.filter(pl.col("module") == name)
    parents = ops.select(
        pl.col("op_id").alias("parent_id"), pl.col("module").alias("parent_module")
    )
    outermost = own.join(parents, on="parent_id", how="left").filter(
        pl.col("parent_module").is_null() | (pl.col("parent_module") != name)
    )
    children = (
        ops.filter(pl.col("parent_id").is_in(outermost["op_id"].implode()))
        .group_by("parent_id")
        .agg(child_ns=pl.col("dur").sum())
    )
    self_time = outermost.join(
        children, left_on="op_id", right_on="parent_id", how="left"
    ).select(
        "ts", dur=(pl.col("dur") - pl.col("child_ns").fill_null(0)).clip(lower_bound=0)
    )
    in_steps = ctx.in_steps(self_time)
    saving = (
        float(in_steps["dur"].sum()) / NS_PER_MS / ctx.steps if in_steps.height else 0.0
    )
    return [
        Finding(
            rule="data_parallel",
            title="nn.DataParallel instead of DistributedDataParallel",
            evidence=(
                f"the model runs under {name}, which drives every GPU from one process: each step it "
                f"replicates the weights, scatters the batch and gathers the outputs ({saving:.2f} ms of host "
                f"time per step in {name} itself, outside the wrapped model)"
            ),
            change=(
                "Use DistributedDataParallel with one process per GPU (torchrun --nproc_per_node N): no "
                "per-step weight copies, gradients all-reduced in buckets overlapped with backward, no GIL "
                "shared between GPUs"
            ),
            saving_ms=saving,
            estimate=f"host time per step spent in {name} outside the wrapped model (GIL contention not counted)",
            where={"module": name},
        )
    ]
