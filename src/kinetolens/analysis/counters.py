"""CUPTI counters per kernel, with the op stack that launched each kernel.

With per-kernel range profiling, Kineto writes one ``cuda_profiler_range``
event per kernel, in launch order, carrying the counter values but no
correlation id (and, in that mode, no kernel activity events at all).  The
n-th range therefore belongs to the n-th kernel launch of the trace.  We pair
them like HTA's ``get_cupti_counter_data_with_operators`` does, with these
differences:

* every kernel-launch API counts (``cudaLaunchKernel``, ``cudaLaunchKernelExC``,
  ``cuLaunchKernel``, ``cuLaunchKernelEx``, cooperative launches), not only
  ``cudaLaunchKernel``;
* when the counts differ, pairing by order would attach counters to the wrong
  ops, so the counters are kept but no op is attached, and ``pairing`` says why
  (HTA returns nothing for the rank);
* the op stack is the launching thread's enclosing PyTorch ops (annotations
  such as ``ProfilerStep#N`` excluded), outermost first; a launch outside any
  op gets an empty stack instead of an error;
* derived columns: ``flops`` from the SASS floating-point instruction
  counters (FMA = 2 FLOPs; per precision too), ``dram_bytes`` from
  ``dram__bytes_read.sum`` + ``dram__bytes_write.sum``, and the Tensor Core
  verdict ``tc`` (measured Tensor Core instructions where present, else the
  kernel-name rules).

A range's ``dur`` is the replay time of the profiler pass, not the kernel's
run time, so no rate (FLOP/s, GB/s) is derived from it.
"""

from __future__ import annotations

import re

import polars as pl

from kinetolens.model.trace import Trace
from kinetolens.registry.tensor_cores import NO, TENSOR_COUNTER, YES, classify

#: Kernel-launch runtime/driver calls, each launching exactly one kernel.
LAUNCH_API = re.compile(r"^(cuda|cu)Launch(Cooperative)?Kernel(ExC|Ex)?(_ptsz|_v\d+)*$")

_SASS = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"
#: SASS instruction counter -> (precision, FLOPs per instruction).
FLOP_COUNTERS: dict[str, tuple[str, int]] = {
    _SASS.format(op): (precision, 2 if op.endswith("fma") else 1)
    for precision, prefix in (("fp64", "d"), ("fp32", "f"), ("fp16", "h"))
    for op in (f"{prefix}add", f"{prefix}mul", f"{prefix}fma")
}
DRAM_COUNTERS = ("dram__bytes_read.sum", "dram__bytes_write.sum")


class NoCounters(Exception):
    """The trace has no CUPTI range-profiler counter values."""


def _wide(counters: pl.DataFrame) -> pl.DataFrame:
    """One row per range, one column per metric (metric columns sorted by name)."""
    ranges = counters.group_by("range_id").agg(
        pl.col("name").first(), pl.col("pid").first(), pl.col("tid").first(), pl.col("ts").first(), pl.col("dur").first()
    )
    values = counters.pivot(on="metric", index="range_id", values="value", aggregate_function="first")
    metric_cols = sorted(c for c in values.columns if c != "range_id")
    return ranges.join(values.select("range_id", *metric_cols), on="range_id").sort(["ts", "range_id"])


def _launches(trace: Trace) -> pl.DataFrame:
    rt = trace.runtime
    return rt.filter(pl.col("name").str.contains(LAUNCH_API.pattern)).sort(["ts", "launch_id"])


def _op_stacks(trace: Trace, op_ids: list[int | None]) -> list[list[str]]:
    """Enclosing op names (kind ``op``), outermost first, for each op id."""
    ops = trace.ops
    parent = dict(zip(ops["op_id"].to_list(), ops["parent_id"].to_list()))
    name = dict(zip(ops["op_id"].to_list(), ops["name"].to_list()))
    is_op = dict(zip(ops["op_id"].to_list(), (ops["kind"].cast(pl.String) == "op").to_list()))
    stacks = []
    for op_id in op_ids:
        stack: list[str] = []
        cur = op_id
        while cur is not None:
            if is_op.get(cur):
                stack.append(name[cur])
            cur = parent.get(cur)
        stacks.append(stack[::-1])
    return stacks


def _sum_present(frame: pl.DataFrame, weights: dict[str, int]) -> pl.Expr:
    """Weighted sum of the present columns; null when none is present."""
    present = [c for c in weights if c in frame.columns]
    if not present:
        return pl.lit(None, pl.Float64)
    return pl.sum_horizontal([pl.col(c) * weights[c] for c in present])


def counter_table(trace: Trace) -> pl.DataFrame:
    """One row per profiled kernel: name, launch, op stack, counters, derived values.

    Columns: ``idx, kernel, launch_id, op_id, op_stack, top_level_op,
    bottom_level_op, pairing, <one column per counter>, flops, flops_fp64,
    flops_fp32, flops_fp16, dram_bytes, tc, tc_source``.
    Raises :class:`NoCounters` when the trace has none.
    """
    counters = trace.kernel_counters
    if counters.height == 0:
        raise NoCounters(
            "no CUPTI counter values in this trace: record them with "
            "kinetolens.profile(counters=[...]) or torch.profiler's "
            "experimental_config=_ExperimentalConfig(profiler_metrics=[...], profiler_measure_per_kernel=True)"
        )
    wide = _wide(counters)
    metric_cols = [c for c in wide.columns if c not in ("range_id", "name", "pid", "tid", "ts", "dur")]
    launches = _launches(trace)
    paired = launches.height == wide.height
    if paired:
        # The innermost enclosing range on the launching thread; the external-id
        # link where containment found none.
        launch_op = launches.select(
            "launch_id", op_id=pl.coalesce("contained_op_id", "op_id") if "contained_op_id" in launches.columns else pl.col("op_id")
        )
        wide = pl.concat([wide, launch_op], how="horizontal")
        pairing = "launch order"
    else:
        wide = wide.with_columns(launch_id=pl.lit(None, pl.Int64), op_id=pl.lit(None, pl.Int64))
        pairing = f"not paired: {wide.height} counter ranges but {launches.height} kernel launches"
    stacks = _op_stacks(trace, wide["op_id"].to_list()) if paired else [[] for _ in range(wide.height)]
    stack = pl.Series("op_stack", stacks, dtype=pl.List(pl.String))

    flop_weights = {c: w for c, (_, w) in FLOP_COUNTERS.items()}
    by_precision = {
        p: {c: w for c, (prec, w) in FLOP_COUNTERS.items() if prec == p} for p in ("fp64", "fp32", "fp16")
    }
    tensor_cols = [c for c in metric_cols if TENSOR_COUNTER.search(c)]
    names = wide["name"].to_list()
    by_name = [classify(n)[0] for n in names]
    measured = pl.max_horizontal([pl.col(c) for c in tensor_cols]) if tensor_cols else pl.lit(None, pl.Float64)
    out = wide.with_row_index("idx").with_columns(
        stack,
        pl.lit(pairing).alias("pairing"),
        pl.Series("tc_name", by_name, dtype=pl.String),
    )
    derived = [
        _sum_present(out, flop_weights).alias("flops"),
        *(_sum_present(out, w).alias(f"flops_{p}") for p, w in by_precision.items()),
        _sum_present(out, dict.fromkeys(DRAM_COUNTERS, 1)).alias("dram_bytes"),
    ]
    derived += [
        pl.when(measured > 0).then(pl.lit(YES)).when(measured.is_not_null()).then(pl.lit(NO))
        .otherwise(pl.col("tc_name")).alias("tc"),
        pl.when(measured.is_not_null()).then(pl.lit("counters")).otherwise(pl.lit("name")).alias("tc_source"),
    ]
    out = out.with_columns(derived)
    return out.select(
        pl.col("idx").cast(pl.Int64),
        pl.col("name").alias("kernel"),
        "launch_id",
        "op_id",
        "op_stack",
        pl.col("op_stack").list.first().alias("top_level_op"),
        pl.col("op_stack").list.last().alias("bottom_level_op"),
        "pairing",
        *metric_cols,
        "flops",
        "flops_fp64",
        "flops_fp32",
        "flops_fp16",
        "dram_bytes",
        "tc",
        "tc_source",
    )
