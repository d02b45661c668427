"""Op types whose kernels move far more DRAM bytes than their shapes need (CUPTI counters)."""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.advice.rule_context import (
    NS_PER_MS,
    RuleContext,
)
from kinetolens.analysis.advice.rule_registry import rule
from kinetolens.analysis.finding import Finding
from kinetolens.analysis.hardware.gpu_spec import gpu_spec

#: Measured DRAM bytes over an op's modeled minimum above which its kernels
#: re-read (or spill) far more than the work needs.  Below 2x, L2 misses on
#: operands read twice and 32-byte sector granularity explain the gap.
DRAM_EXCESS_RATIO = 2.0
#: Excess DRAM traffic per step below which a finding is noise (tiny ops).
DRAM_EXCESS_MIN_BYTES = 1 << 20
#: At most this many op types are reported by the DRAM-traffic rule.
DRAM_EXCESS_TOP = 3


@rule(requires=("gpu",))
def excess_dram_traffic(ctx: RuleContext) -> list[Finding]:
    """Op types whose kernels moved far more DRAM bytes (CUPTI counters) than
    their shapes need.  The saving is the excess bytes' time at the GPU's
    peak DRAM bandwidth (the least that traffic can cost), capped at the
    ops' kernel time when the trace has kernel timings."""
    if ctx.trace.kernel_counters.height == 0:
        return []
    from kinetolens.analysis.hardware.counters import measured_vs_modeled, op_measured
    from kinetolens.analysis.workload.work import carried_work

    table = measured_vs_modeled(ctx.trace).filter(
        (pl.col("bytes_ratio") >= DRAM_EXCESS_RATIO)
        & (pl.col("excess_bytes") / ctx.steps >= DRAM_EXCESS_MIN_BYTES)
    )
    if table.height == 0:
        return []
    spec = gpu_spec(ctx.trace)
    bw = spec.dram_gbps if spec is not None else None  # GB/s = bytes per ns
    calls = op_measured(ctx.trace)
    kernels = carried_work(ctx.trace).kernels
    out = []
    for row in table.head(DRAM_EXCESS_TOP).iter_rows(named=True):
        ids = calls.filter(pl.col("name") == row["op"])["op_id"]
        kernel_ms = (
            float(kernels.filter(pl.col("carrier").is_in(ids.implode()))["dur"].sum())
            / NS_PER_MS
            / ctx.steps
        )
        excess = row["excess_bytes"] / ctx.steps
        saving = excess / bw / NS_PER_MS if bw else 0.0
        if kernel_ms > 0:
            saving = min(saving, kernel_ms)
        module = (
            ctx.trace.ops.filter(pl.col("op_id").is_in(ids.implode()))["module"]
            .drop_nulls()
            .mode()
            .sort()  # ties: the first by name (a mode lists its ties in no set order)
        )
        out.append(
            Finding(
                rule="excess_dram_traffic",
                title=f"{row['op']} moves far more DRAM bytes than its shapes need",
                evidence=(
                    f"{row['calls']} calls ({row['kernels']} kernels) moved {row['measured_bytes'] / 1e6:,.1f} MB "
                    f"of DRAM traffic (CUPTI dram__bytes_read + write) against a modeled minimum of "
                    f"{row['bytes'] / 1e6:,.1f} MB: {row['bytes_ratio']:.1f}x, {excess / 1e6:,.1f} MB extra per step"
                ),
                change=(
                    "Find why its kernels re-read operands: layout conversions or non-contiguous inputs (transposes, "
                    "channels_last mismatches), tiles too small for the shape (check the kernel chosen; "
                    "cudnn.benchmark), unfused elementwise chains; Nsight Compute's memory workload analysis "
                    "shows where the traffic goes"
                    if ctx.kind.pytorch
                    else "Find why its kernels re-read operands: non-contiguous or transposed inputs, tiles too "
                    "small for the shape, unfused kernels; Nsight Compute's memory workload analysis shows where "
                    "the traffic goes"
                ),
                saving_ms=saving,
                estimate=(
                    f"extra bytes per step at peak DRAM bandwidth ({bw:,.0f} GB/s)"
                    + (", capped at the ops' kernel time" if kernel_ms > 0 else "")
                    if bw
                    else "GPU bandwidth unknown: no time estimate"
                ),
                where={
                    "op": row["op"],
                    "module": module[0] if module.len() else None,
                    "bytes_ratio": row["bytes_ratio"],
                },
            )
        )
    return out
