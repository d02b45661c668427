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
  counters (FMA = 2 FLOPs; per precision too), ``tensor_flops`` from
  Nsight Compute's Tensor Core math counters, ``dram_bytes`` from
  ``dram__bytes_read.sum`` + ``dram__bytes_write.sum``, and the Tensor Core
  verdict ``tc`` (measured Tensor Core math where counted, else Tensor Core
  instructions where present, else the kernel-name rules).

Nsight Compute's counters (``kinetolens.load(..., ncu=CSV)``) arrive with
each kernel already paired with its launch
(:mod:`kinetolens.model.ncu_pairing`); ``pairing`` then says so.

A range's ``dur`` is the replay time of the profiler pass, not the kernel's
run time, so no rate (FLOP/s, GB/s) is derived from it.

Measured beside modeled (:func:`kernel_measured`, :func:`op_measured`,
:func:`measured_vs_modeled`): each profiled kernel's measured FLOPs and DRAM
bytes are summed per op that carries modeled work
(:mod:`kinetolens.analysis.workload.work`), so a kernel that moves far more DRAM
bytes than its op's minimum is visible without kernel timings (per-kernel
range profiling records none).  ``measured_flops`` is null for Tensor Core
kernels: their math runs as HMMA/GMMA instructions, which the SASS
floating-point counters do not count, so the sum would be a meaningless
floor.
"""

from __future__ import annotations

import re

import polars as pl

from kinetolens.analysis.workload.work import carried_work
from kinetolens.model.trace import Trace
from kinetolens.registry.tensor_cores import NO, TENSOR_FLOP_COUNTER, YES, classify, deciding_tensor_counters

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


#: The columns of a range, beside its metrics.
RANGE_COLUMNS = ("range_id", "name", "pid", "tid", "ts", "dur", "launch_id")


def _wide(counters: pl.DataFrame) -> pl.DataFrame:
    """One row per range, one column per metric (metric columns sorted by name)."""
    ranges = counters.group_by("range_id").agg(pl.col(c).first() for c in RANGE_COLUMNS if c != "range_id")
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
    flops_fp32, flops_fp16, tensor_flops, dram_bytes, tc, tc_source``
    (``tensor_flops``: Tensor Core FLOPs where Nsight Compute's
    ``sm__ops_path_tensor_*`` counters were recorded, else null).
    Raises :class:`NoCounters` when the trace has none.
    """
    counters = trace.kernel_counters
    if counters.height == 0:
        raise NoCounters(
            "no CUPTI counter values in this trace: record them with "
            "kinetolens.profile(counters=[...]) or torch.profiler's "
            "experimental_config=_ExperimentalConfig(profiler_metrics=[...], profiler_measure_per_kernel=True), "
            "or pair Nsight Compute's CSV of the same step with --ncu (docs/counters.md)"
        )
    wide = _wide(counters)
    metric_cols = [c for c in wide.columns if c not in RANGE_COLUMNS]
    launches = _launches(trace)
    # A launch's op: the innermost enclosing range on the launching thread; the
    # external-id link where containment found none.
    launch_op = launches.select("launch_id", op_id=pl.coalesce("contained_op_id", "op_id"))
    linked = wide["launch_id"].null_count() < wide.height
    paired = linked or launches.height == wide.height
    if linked:  # Nsight Compute's kernels, each paired with its launch when loaded
        wide = wide.join(launch_op, on="launch_id", how="left")
        pairing = "kernel name, grid and block"
    elif paired:
        wide = pl.concat([wide.drop("launch_id"), launch_op], how="horizontal")
        pairing = "launch order"
    else:
        wide = wide.with_columns(op_id=pl.lit(None, pl.Int64))
        pairing = f"not paired: {wide.height} counter ranges but {launches.height} kernel launches"
    stacks = _op_stacks(trace, wide["op_id"].to_list()) if paired else [[] for _ in range(wide.height)]
    stack = pl.Series("op_stack", stacks, dtype=pl.List(pl.String))

    flop_weights = {c: w for c, (_, w) in FLOP_COUNTERS.items()}
    by_precision = {
        p: {c: w for c, (prec, w) in FLOP_COUNTERS.items() if prec == p} for p in ("fp64", "fp32", "fp16")
    }
    tensor_flop_cols = [c for c in metric_cols if TENSOR_FLOP_COUNTER.match(c)]
    deciding = deciding_tensor_counters(metric_cols)
    names = wide["name"].to_list()
    by_name = [classify(n)[0] for n in names]
    measured = pl.max_horizontal([pl.col(c) for c in deciding]) if deciding else pl.lit(None, pl.Float64)
    out = wide.with_row_index("idx").with_columns(
        stack,
        pl.lit(pairing).alias("pairing"),
        pl.Series("tc_name", by_name, dtype=pl.String),
    )
    derived = [
        _sum_present(out, flop_weights).alias("flops"),
        *(_sum_present(out, w).alias(f"flops_{p}") for p, w in by_precision.items()),
        _sum_present(out, dict.fromkeys(DRAM_COUNTERS, 1)).alias("dram_bytes"),
        _sum_present(out, dict.fromkeys([c for c in tensor_flop_cols if "_src_int" not in c], 1)).alias("tensor_flops"),
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
        "tensor_flops",
        "dram_bytes",
        "tc",
        "tc_source",
    )


def kernels_profiled(trace: Trace) -> tuple[int, int]:
    """How many of the trace's kernels carry counters paired with their
    launch, and how many kernels (no copies or memsets) the trace has."""
    from kinetolens.model.ncu_pairing import launch_ordered_kernels

    linked = trace.kernel_counters.filter(pl.col("launch_id").is_not_null())["launch_id"].n_unique()
    return linked, launch_ordered_kernels(trace).height


_MEASURED_SCHEMA = {"launch_id": pl.Int64, "op_id": pl.Int64, "measured_flops": pl.Float64, "measured_bytes": pl.Float64}


def kernel_measured(trace: Trace) -> pl.DataFrame:
    """Measured work of every profiled kernel paired with its launch.

    Columns: ``launch_id, op_id, measured_flops, measured_bytes``, where
    ``measured_flops = fadd + fmul + 2 * ffma`` summed over fp64 (d), fp32
    (f) and fp16 (h) SASS instruction counters, plus the Tensor Core FLOPs
    where those were counted (else null on Tensor Core kernels
    or without those counters) and ``measured_bytes = dram__bytes_read.sum
    + dram__bytes_write.sum`` (null without them).  Empty when the trace has
    no counters or its ranges cannot be paired with launches.
    """
    if trace.kernel_counters.height == 0:
        return pl.DataFrame(schema=_MEASURED_SCHEMA)
    table = counter_table(trace).filter(pl.col("launch_id").is_not_null())
    return table.select(
        "launch_id",
        "op_id",
        measured_flops=pl.when(pl.col("tensor_flops").is_not_null()).then(pl.col("flops") + pl.col("tensor_flops"))
        .when(pl.col("tc") != YES).then(pl.col("flops")),
        measured_bytes=pl.col("dram_bytes"),
    )


def _carrier_of(trace: Trace, op_ids: list[int | None], carriers: set[int]) -> list[int | None]:
    """The op carrying each op's modeled work: itself or its nearest ancestor
    among ``carriers`` (carrying ops never nest, so it is unique)."""
    parent = dict(zip(trace.ops["op_id"].to_list(), trace.ops["parent_id"].to_list()))
    out: list[int | None] = []
    for op_id in op_ids:
        cur = op_id
        while cur is not None and cur not in carriers:
            cur = parent.get(cur)
        out.append(cur)
    return out


def op_measured(trace: Trace) -> pl.DataFrame:
    """Measured beside modeled work for every op call carrying modeled work
    whose kernels were profiled.

    Columns: ``op_id, name, kernels, flops, bytes`` (modeled),
    ``measured_flops, measured_bytes`` (summed over the op's kernels; null
    when any of them lacks the counter, so a partial sum never passes for
    the whole), ``flops_ratio, bytes_ratio`` (measured / modeled).
    """
    schema = {"op_id": pl.Int64, "name": pl.String, "kernels": pl.UInt32, "flops": pl.Float64, "bytes": pl.Float64,
              "measured_flops": pl.Float64, "measured_bytes": pl.Float64, "flops_ratio": pl.Float64,
              "bytes_ratio": pl.Float64}  # fmt: skip
    measured = kernel_measured(trace)
    if measured.height == 0:
        return pl.DataFrame(schema=schema)
    modeled = carried_work(trace).ops
    carriers = _carrier_of(trace, measured["op_id"].to_list(), set(modeled["op_id"].to_list()))
    measured = measured.with_columns(pl.Series("carrier", carriers, dtype=pl.Int64)).filter(
        pl.col("carrier").is_not_null()
    )
    per_op = measured.group_by("carrier").agg(
        kernels=pl.len(),
        measured_flops=pl.when(pl.col("measured_flops").null_count() == 0).then(pl.col("measured_flops").sum()),
        measured_bytes=pl.when(pl.col("measured_bytes").null_count() == 0).then(pl.col("measured_bytes").sum()),
    )
    out = (
        modeled.select("op_id", "flops", "bytes")
        .join(per_op.rename({"carrier": "op_id"}), on="op_id", how="inner")
        .join(trace.ops.select("op_id", "name"), on="op_id", how="left")
    )
    return out.select(
        "op_id", "name", "kernels", "flops", "bytes", "measured_flops", "measured_bytes",
        flops_ratio=pl.when(pl.col("flops") > 0).then(pl.col("measured_flops") / pl.col("flops")),
        bytes_ratio=pl.when(pl.col("bytes") > 0).then(pl.col("measured_bytes") / pl.col("bytes")),
    ).sort("op_id")  # fmt: skip


def measured_vs_modeled(trace: Trace) -> pl.DataFrame:
    """:func:`op_measured` summed per op name, most excess DRAM bytes first.

    Columns: ``op, calls, kernels, flops, measured_flops, flops_ratio, bytes,
    measured_bytes, bytes_ratio, excess_bytes`` (measured minus modeled
    bytes, over the calls with both).  Ratios are taken over the calls that
    have both numbers.
    """
    ops = op_measured(trace)
    has_f = pl.col("measured_flops").is_not_null() & (pl.col("flops") > 0)
    has_b = pl.col("measured_bytes").is_not_null() & (pl.col("bytes") > 0)
    out = ops.group_by("name").agg(
        calls=pl.len(),
        kernels=pl.col("kernels").sum(),
        flops=pl.col("flops").sum(),
        measured_flops=pl.when(pl.col("measured_flops").is_not_null().any()).then(pl.col("measured_flops").sum()),
        _f=pl.col("flops").filter(has_f).sum(),
        _mf=pl.col("measured_flops").filter(has_f).sum(),
        bytes=pl.col("bytes").sum(),
        measured_bytes=pl.when(pl.col("measured_bytes").is_not_null().any()).then(pl.col("measured_bytes").sum()),
        _b=pl.col("bytes").filter(has_b).sum(),
        _mb=pl.col("measured_bytes").filter(has_b).sum(),
    )
    out = out.with_columns(
        flops_ratio=pl.when(pl.col("_f") > 0).then(pl.col("_mf") / pl.col("_f")),
        bytes_ratio=pl.when(pl.col("_b") > 0).then(pl.col("_mb") / pl.col("_b")),
        excess_bytes=pl.when(pl.col("_b") > 0).then(pl.col("_mb") - pl.col("_b")),
    )
    return out.select(
        pl.col("name").alias("op"), "calls", "kernels", "flops", "measured_flops", "flops_ratio", "bytes",
        "measured_bytes", "bytes_ratio", "excess_bytes",
    ).sort(["excess_bytes", "op"], descending=[True, False], nulls_last=True)  # fmt: skip
