"""How far each kernel, op and module runs from its roofline.

The roofline of a piece of work with ``F`` FLOPs and ``B`` minimum bytes
(:mod:`kinetolens.analysis.workload.work`) on a GPU with compute peak ``P`` (for
the precision the work ran in) and DRAM bandwidth ``W``:

* arithmetic intensity ``I = F / B`` (FLOP per byte);
* attainable performance ``min(P, I * W)``; ``bound`` says which term wins;
* the *ideal time* ``max(F / P, B / W)``: the time the work takes at 100 % of
  its roof.  Percent of roofline is ``ideal / measured device time``, which
  equals achieved FLOP/s over attainable FLOP/s and, for work with no FLOPs
  (copies, gathers), achieved over peak bandwidth.

The *ceiling* picks ``P`` (:func:`ceiling`): work on Tensor Cores uses the
Tensor Core peak of its dtype (``bf16 tensor`` ...; fp32 on Tensor Cores is
TF32, fp64 the FP64 Tensor Core peak); work known not to run on them the
CUDA-core (vector) FP32 peak, FP64 its vector peak.  Half-precision
CUDA-core math can exceed the FP32 peak, but such kernels are memory-bound
in practice, so the lower roof changes no verdict.  When the kernel names
do not say whether a matrix op (GEMM, convolution, attention) ran on Tensor
Cores (Triton templates, ROCm ``attn_fwd``), a dtype PyTorch runs on Tensor
Cores by default (fp16, bf16, fp8, int8) is held to that Tensor Core peak
and marked ``ceiling_assumed``; an fp32 or fp64 one gets no ceiling, since
either unit is likely and their peaks differ up to 8x.  Never the CUDA-core
peak: that would inflate percent of roof and hide time lost.  Where the
dtype is not recorded, the roof is unknown too: no number is better than a
wrong one.  ``precision`` is the dtype the work computes in (``tf32`` for
fp32 on Tensor Cores), whatever the ceiling.

Time lost is ``device time - ideal time`` (and against a realistic 75 % of
the roof, ``device time - ideal / 0.75``), clipped at zero per op call:
a call already beyond the target loses nothing, and one measured above
its roof (L2-resident inputs the DRAM roof cannot see) cannot pay back
what another lost.  Ops without a FLOP/byte formula have no roofline and
are not in these tables.
"""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.hardware.counters import kernel_measured, op_measured
from kinetolens.analysis.workload.group_labels import counts, listed
from kinetolens.analysis.workload.modules import module_calls, with_calls
from kinetolens.analysis.workload.op_groups import weighted_mean
from kinetolens.analysis.hardware.tensor_cores import kernel_tensor_cores, matrix_dtype
from kinetolens.analysis.workload.work import carried_work, kernel_work
from kinetolens.errors import TraceError
from kinetolens.model.earlier_launches import without_earlier_iteration
from kinetolens.model.ownership import starts_in
from kinetolens.model.trace import Trace
from kinetolens.model.vocabulary import matrix_ops
from kinetolens.registry.dtypes import canonical
from kinetolens.registry.flops import REGISTRY, OpArgs
from kinetolens.registry.flops_base import json_list
from kinetolens.registry.gpus import GpuSpec
from kinetolens.registry.kernel_precision import declared_precision
from kinetolens.registry.tensor_cores import (
    DEFAULT_TENSOR_CORE_DTYPES,
    NO,
    UNKNOWN,
    YES,
)

#: The share of the roof a well-tuned kernel reaches in practice.
REALISTIC = 0.75
#: Every grouping :func:`roofline_by` knows, with its op columns (those of
#: :func:`kinetolens.analysis.workload.ops.op_stats`, so its tables can be joined).
GROUP_KEYS = {"op": ["name"], "op+shape": ["name", "shapes"], "module": ["module"], "source": ["source"]}

#: Tensor Core peak by input dtype (fp32 inputs run as TF32).
_TC_PEAK = {
    "fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "fp6": "fp6", "fp4": "fp4", "fp4x2": "fp4", "int8": "int8", "uint8": "int8",
    "fp32": "tf32", "tf32": "tf32", "fp64": "fp64",
}  # fmt: skip
#: Every compute ceiling :func:`ceiling` names -> the spec precision its peak is read from.
CEILINGS = {
    "fp16 tensor": "fp16", "bf16 tensor": "bf16", "fp8 tensor": "fp8", "fp6 tensor": "fp6", "fp4 tensor": "fp4",
    "int8 tensor": "int8",
    "tf32 tensor": "tf32", "fp64 tensor": "fp64_tensor", "fp32 vector": "fp32", "fp64 vector": "fp64",
}  # fmt: skip


def precision(dtype: str | None, tc: str | None) -> str | None:
    """The precision work computes in: its dtype, ``tf32`` for fp32 on Tensor Cores."""
    return "tf32" if dtype == "fp32" and tc == YES else dtype


def tensor_core_op(name: str | None) -> bool:
    """Whether PyTorch runs ``name`` (an op carrying work) on Tensor Cores where it can."""
    return name is not None and name in matrix_ops()


def ceiling(name: str | None, dtype: str | None, tc: str | None) -> tuple[str | None, bool]:
    """(compute ceiling, assumed) for op ``name``'s work in ``dtype`` whose
    kernels' Tensor Core verdict is ``tc``; None when it cannot be told.

    ``assumed`` is true for a matrix op of a dtype PyTorch runs on Tensor
    Cores by default whose kernel names do not say where it ran.
    """
    if dtype is None:
        return None, False
    if tc == YES:
        peak = _TC_PEAK.get(dtype)
        return (f"{peak} tensor" if peak else None), False
    if tc != NO and tensor_core_op(name) and dtype in _TC_PEAK:
        if dtype in DEFAULT_TENSOR_CORE_DTYPES:
            return f"{_TC_PEAK[dtype]} tensor", True
        return None, False  # fp32 (TF32 or not) and fp64 (DMMA or not): the names do not say
    return ("fp64 vector" if dtype == "fp64" else "fp32 vector"), False


def peak_tflops(spec: GpuSpec, ceiling_name: str | None) -> float | None:
    """Dense peak of one of :func:`ceiling`'s answers (an FP64 Tensor Core
    ceiling falls back to the vector FP64 peak on GPUs without them)."""
    if spec.peak_override_tflops is not None:
        return spec.peak_override_tflops
    key = CEILINGS.get(ceiling_name) if ceiling_name else None
    if key is None:
        return None
    if key == "fp64_tensor":
        return spec.tflops.get("fp64_tensor", spec.tflops.get("fp64"))
    return spec.tflops.get(key)


_CEILING_SCHEMA = {"precision": pl.String, "ceiling": pl.String, "ceiling_assumed": pl.Boolean}


def _with_ceilings(frame: pl.DataFrame, name_col: str) -> pl.DataFrame:
    """Add ``precision, ceiling, ceiling_assumed`` from ``name_col`` (the op
    carrying the work), ``dtype``, ``tc`` and ``declared`` (the precision
    its Tensor Core kernels' names declare, which wins over the op's input
    dtype: :mod:`kinetolens.registry.kernel_precision`), once per distinct
    combination."""
    keys = [name_col, "dtype", "tc", "declared"]
    distinct = frame.select(keys).unique()
    rows = []
    for n, d, t, declared in distinct.iter_rows():
        computes = declared if declared is not None and t == YES else d
        rows.append((n, d, t, declared, precision(computes, t), *ceiling(n, computes, t)))
    table = pl.DataFrame(rows, schema={**distinct.schema, **_CEILING_SCHEMA}, orient="row")
    return frame.join(table, on=keys, how="left", nulls_equal=True, maintain_order="left")


def _with_declared(k: pl.DataFrame) -> pl.DataFrame:
    """``k`` (``name``, ``tc``) with ``declared``: the precision a Tensor Core
    kernel's name declares (null for others), read once per distinct name."""
    names = k.filter(pl.col("tc") == YES)["name"].drop_nulls().unique()
    table = pl.DataFrame(
        {"name": names, "_declared": [declared_precision(n) for n in names.to_list()]},
        schema={"name": k.schema["name"], "_declared": pl.String},
    )
    k = k.join(table, on="name", how="left", maintain_order="left")
    return k.with_columns(declared=pl.when(pl.col("tc") == YES).then(pl.col("_declared"))).drop("_declared")


def require_roofs(spec: GpuSpec | None, trace: Trace) -> GpuSpec:
    """The spec, or a :class:`TraceError` saying which ceiling is missing and how to give it."""
    how = "pass --peak-tflops and --peak-gbps, or --spec FILE"
    if spec is None:
        from kinetolens.analysis.hardware.gpu_spec import trace_device

        device = trace_device(trace)
        name = device.get("name") if device else None
        what = f"unknown GPU {name!r}" if name else "the trace names no GPU"
        raise TraceError(trace.path, f"{what}: no peak FLOP/s or bandwidth to draw a roofline; {how}")
    if not spec.dram_gbps:
        raise TraceError(trace.path, f"GPU spec {spec.name!r} has no DRAM bandwidth; {how}")
    if spec.peak_override_tflops is None and not spec.tflops:
        raise TraceError(trace.path, f"GPU spec {spec.name!r} has no peak FLOP/s; {how}")
    return spec


def _with_roof(frame: pl.DataFrame, spec: GpuSpec, time_col: str) -> pl.DataFrame:
    """Add intensity, peak, attainable, achieved, ideal time, percent and bound.

    Needs ``flops``, ``bytes``, ``ceiling`` and ``time_col`` (ns).  A
    single ``--peak-tflops`` override is every work's ceiling (``override``).
    """
    if spec.peak_override_tflops is not None:
        peak = pl.lit(spec.peak_override_tflops, pl.Float64)
        frame = frame.with_columns(ceiling=pl.lit("override"), ceiling_assumed=pl.lit(False))
    else:
        peaks = {c: peak_tflops(spec, c) for c in frame["ceiling"].drop_nulls().unique().to_list()}
        peak = pl.col("ceiling").replace_strict(peaks, default=None, return_dtype=pl.Float64)
    bw = float(spec.dram_gbps or 0.0)
    frame = frame.with_columns(peak_tflops=peak, flops=pl.col("flops").fill_null(0.0))
    # ns at the roof: FLOPs / (TFLOP/s * 1e3) and bytes / (GB/s).
    compute_ns = pl.when(pl.col("flops") > 0).then(pl.col("flops") / (pl.col("peak_tflops") * 1e3)).otherwise(0.0)
    memory_ns = pl.col("bytes") / bw
    frame = frame.with_columns(_compute_ns=compute_ns, _memory_ns=memory_ns)
    ideal = pl.max_horizontal("_compute_ns", "_memory_ns")
    ideal = pl.when(pl.col("_compute_ns").is_null() | pl.col("_memory_ns").is_null()).then(None).otherwise(ideal)
    t = pl.when(pl.col(time_col) > 0).then(pl.col(time_col).cast(pl.Float64))
    frame = frame.with_columns(ideal_ns=ideal)
    return frame.with_columns(
        intensity=pl.when(pl.col("bytes") > 0).then(pl.col("flops") / pl.col("bytes")),
        attainable_tflops=pl.min_horizontal("peak_tflops", pl.col("flops") / pl.col("bytes") * bw / 1e3),
        achieved_tflops=pl.col("flops") / t / 1e3,
        achieved_gbps=pl.col("bytes") / t,
        pct_of_roof=pl.col("ideal_ns") / t * 100.0,
        bound=pl.when(pl.col("ideal_ns").is_null())
        .then(None)
        .when(pl.col("_compute_ns") >= pl.col("_memory_ns"))
        .then(pl.lit("compute"))
        .otherwise(pl.lit("memory")),
    ).drop("_compute_ns", "_memory_ns")


def kernel_roofline(trace: Trace, spec: GpuSpec | None) -> pl.DataFrame:
    """One row per kernel with work: its roof, achieved performance and percent of roof.

    Columns: ``kernel_id, name, op, dtype, tc, precision, ceiling,
    ceiling_assumed, flops, bytes, estimated, dur_us, intensity,
    peak_tflops, attainable_tflops, achieved_tflops, achieved_gbps,
    pct_of_roof, bound, ideal_us``.  The dtype, and so the precision and
    ceiling, are those of the op carrying the kernel's work (the one
    :func:`op_roofline` has a row for); ``tc`` is the kernel's own.  A
    trace with CUPTI counters adds the measured values beside the modeled
    ones (:func:`kinetolens.analysis.hardware.counters.kernel_measured`):
    ``measured_flops, measured_bytes, bytes_ratio`` (measured DRAM bytes
    over the kernel's modeled ``bytes``, a share of its op's when
    ``estimated``).
    """
    spec = require_roofs(spec, trace)
    carried = carried_work(trace)
    work = kernel_work(trace)
    k = (
        trace.kernels.select("kernel_id", "name", "op", "dur")
        .join(work, on="kernel_id", how="inner")
        .join(carried.kernels.select("kernel_id", "carrier"), on="kernel_id", how="left")
        .join(kernel_tensor_cores(trace).select("kernel_id", "tc"), on="kernel_id", how="left")
    )
    carriers = k["carrier"].drop_nulls().unique().to_list()
    dtypes = _op_dtypes(trace, carriers)
    names = trace.ops.filter(pl.col("op_id").is_in(carriers)).select(carrier="op_id", carrier_name="name")
    k = k.join(names, on="carrier", how="left").with_columns(
        dtype=pl.col("carrier").replace_strict(dtypes, default=None, return_dtype=pl.String),
    )
    k = _with_declared(k)
    k = _with_roof(_with_ceilings(k, "carrier_name"), spec, "dur")
    out = k.select(
        "kernel_id", "name", "op", "dtype", "tc", "precision", "ceiling", "ceiling_assumed", "flops", "bytes",
        "estimated", dur_us=pl.col("dur") / 1000.0, intensity="intensity", peak_tflops="peak_tflops",
        attainable_tflops="attainable_tflops", achieved_tflops="achieved_tflops", achieved_gbps="achieved_gbps",
        pct_of_roof="pct_of_roof", beats_model=beats_model(), bound="bound", ideal_us=pl.col("ideal_ns") / 1000.0,
    ).sort("kernel_id")  # fmt: skip
    if trace.kernel_counters.height:
        measured = trace.kernels.select("kernel_id", "launch_id").join(
            kernel_measured(trace).drop("op_id"), on="launch_id", how="inner"
        )
        out = out.join(measured.drop("launch_id"), on="kernel_id", how="left").with_columns(_bytes_ratio())
    return out


def _bytes_ratio() -> pl.Expr:
    return pl.when(pl.col("bytes") > 0).then(pl.col("measured_bytes") / pl.col("bytes")).alias("bytes_ratio")


def _op_dtype(name: str, dims: list, types: list) -> str | None:
    """The dtype an op computes in: a matrix op's first operand's; any other
    op's first non-bool tensor input's (``where``'s condition and a masked
    op's mask are bool, the values they select are not); the registry's word
    where the op names it (engine ops with an ``out`` first, packed FP4)."""
    entry = REGISTRY.get(name)
    if entry is not None and entry.precision is not None:
        return entry.precision(OpArgs(name, dims, types, []))
    if tensor_core_op(name):
        return matrix_dtype(name, dims, types)
    found = [d for d in (canonical(str(t)) if t else None for t in types) if d is not None]
    return next((d for d in found if d != "bool"), found[0] if found else None)


def _op_dtypes(trace: Trace, ids: list[int] | None = None) -> dict[int, str]:
    ops = trace.ops.select("op_id", "name", "input_dims", "input_types")
    if ids is not None:
        ops = ops.filter(pl.col("op_id").is_in(ids))
    out = {}
    for name, dims, types in ops.select("name", "input_dims", "input_types").unique().iter_rows():
        d = _op_dtype(name, json_list(dims), json_list(types))
        if d is not None:
            out[(name, dims, types)] = d
    keys = ops.select("op_id", "name", "input_dims", "input_types").iter_rows()
    return {op_id: out[(n, d, t)] for op_id, n, d, t in keys if (n, d, t) in out}


def _op_tc(verdicts: list[str]) -> str:
    if YES in verdicts:
        return YES
    return NO if verdicts and all(v == NO for v in verdicts) else UNKNOWN


def op_roofline(trace: Trace, spec: GpuSpec | None) -> pl.DataFrame:
    """One row per op call carrying work (linear -> addmm counts at addmm).

    Device time is that of every GPU activity launched inside the op, at
    any depth; the op ran on Tensor Cores when any of its kernels did.
    Columns: ``op_id, name, module, source, step, shapes, dtype, tc,
    precision, ceiling, ceiling_assumed, flops, bytes, device_us, intensity,
    peak_tflops, attainable_tflops,
    achieved_tflops, achieved_gbps, pct_of_roof, bound, ideal_us, lost_us,
    lost_75_us``; with CUPTI counters also ``measured_flops,
    measured_bytes, bytes_ratio`` (:func:`kinetolens.analysis.hardware.counters.op_measured`).
    """
    spec = require_roofs(spec, trace)
    carried = carried_work(trace)
    ops = carried.ops.select("op_id", "flops", "bytes")
    k = carried.kernels.join(kernel_tensor_cores(trace).select("kernel_id", "tc", "name"), on="kernel_id", how="left")
    k = _with_declared(k)
    per_op = k.group_by("carrier").agg(
        device_ns=pl.col("dur").sum(),
        verdicts=pl.col("tc").filter(pl.col("kind") == "kernel"),
        # the precision of the declaring kernel with the most time
        declared=pl.col("declared").sort_by("dur", descending=True).drop_nulls().first(),
    )
    ops = ops.join(per_op.rename({"carrier": "op_id"}), on="op_id", how="inner").filter(pl.col("device_ns") > 0)
    dtypes = _op_dtypes(trace, ops["op_id"].to_list())
    meta = trace.ops.select("op_id", "name", "module", "source", "step", "input_dims")
    ops = ops.join(meta, on="op_id", how="left").with_columns(
        dtype=pl.col("op_id").replace_strict(dtypes, default=None, return_dtype=pl.String),
        tc=pl.col("verdicts").map_elements(lambda v: _op_tc(list(v)), return_dtype=pl.String),
    )
    ops = _with_roof(_with_ceilings(ops, "name"), spec, "device_ns")
    from kinetolens.analysis.workload.params import shapes_expr

    out = ops.select(
        "op_id", "name", "module", "source", "step", shapes_expr().alias("shapes"), "dtype", "tc", "precision",
        "ceiling", "ceiling_assumed", "flops", "bytes",
        device_us=pl.col("device_ns") / 1000.0, intensity="intensity", peak_tflops="peak_tflops",
        attainable_tflops="attainable_tflops", achieved_tflops="achieved_tflops", achieved_gbps="achieved_gbps",
        pct_of_roof="pct_of_roof", beats_model=beats_model(), bound="bound", ideal_us=pl.col("ideal_ns") / 1000.0,
        lost_us=((pl.col("device_ns") - pl.col("ideal_ns")) / 1000.0).clip(lower_bound=0.0),
        lost_75_us=((pl.col("device_ns") - pl.col("ideal_ns") / REALISTIC) / 1000.0).clip(lower_bound=0.0),
    ).sort("op_id")  # fmt: skip
    if trace.kernel_counters.height:
        measured = op_measured(trace).select("op_id", "measured_flops", "measured_bytes")
        out = out.join(measured, on="op_id", how="left").with_columns(_bytes_ratio())
    return out


#: Marks a row that ran faster than its roof allows (% of roof above 100): the
#: model is off for it (the modeled bytes or FLOPs, or the GPU's peaks), so the
#: figure is flagged beside it, never taken as headroom or a measurement.
BEATS_MODEL = "beats_model"


def beats_model() -> pl.Expr:
    """The :data:`BEATS_MODEL` flag of rows with a ``pct_of_roof``."""
    return (pl.col("pct_of_roof") > 100.0).alias(BEATS_MODEL)


#: A group's % of roof: its summed ideal time over the device time of the calls whose roof is known.
_PCT_OF_ROOF = pl.col("ideal_us") / pl.when(pl.col("_known_us") > 0).then(pl.col("_known_us")) * 100.0


def roofline_points(ops: pl.DataFrame) -> pl.DataFrame:
    """The points of a roofline chart: :func:`op_roofline`'s calls with FLOPs and bytes grouped by
    op, shapes, ceiling and bound; ``intensity, achieved_tflops, pct_of_roof`` as :func:`roofline_by`
    computes them; sorted by device time."""
    known = pl.col("ideal_us").is_not_null()
    return (
        ops.filter(pl.col("intensity").is_not_null() & (pl.col("intensity") > 0) & (pl.col("flops") > 0))
        .group_by("name", "shapes", "ceiling", "bound")
        .agg(
            calls=pl.len(),
            device_us=pl.col("device_us").sum(),
            _known_us=pl.col("device_us").filter(known).sum(),
            ideal_us=pl.when(known.any()).then(pl.col("ideal_us").sum()),
            flops=pl.col("flops").sum(),
            bytes=pl.col("bytes").sum(),
        )
        .with_columns(
            intensity=pl.col("flops") / pl.col("bytes"),
            achieved_tflops=pl.col("flops") / pl.col("device_us") / 1e6,
            pct_of_roof=_PCT_OF_ROOF,
        )
        .drop("_known_us")
        .sort("device_us", descending=True)
    )


def roofline_by(trace: Trace, spec: GpuSpec | None, by: str = "op", *, step: int | None = None) -> pl.DataFrame:
    """Op calls grouped by op name (``by="op"``), op and shapes, module or
    source line, sorted by time lost; ``step`` keeps one profiler step.

    Columns: the key (``op``; ``op, shapes``; ``module``; ``source``), then
    ``calls, device_us, ideal_us, pct_of_roof, lost_us, lost_75_us, flops,
    bytes, intensity, achieved_tflops, achieved_gbps, bound, precision,
    ceiling, assumed_us``.  ``pct_of_roof`` is summed ideal time over summed
    device time; ``bound`` compares the group's ``intensity`` with the ridge
    point of its ``ceiling`` (so the label agrees with the row's own numbers,
    whatever its single calls are), ``precision`` and ``ceiling`` those of the call with the most FLOPs
    (then device time; no ceiling where the group does no FLOPs).
    ``assumed_us`` is the device time of calls held to an assumed Tensor
    Core ceiling (:func:`ceiling`).  Calls whose roof is unknown (a dtype,
    byte count or ceiling not known) keep their device time but add no ideal
    or lost time, and ``pct_of_roof`` leaves them out.  A null module or source reads
    ``(no module)`` / ``(no source)``.  With CUPTI counters, also
    ``measured_flops, measured_bytes, bytes_ratio`` (the ratio over the
    calls with both counts).
    """
    if by not in GROUP_KEYS:
        raise ValueError(f"unknown grouping {by!r}; choose from {', '.join(GROUP_KEYS)}")
    # as op_stats and module_tree: the previous iteration's tail (ops copied from the next) is in no step
    ops = op_roofline(without_earlier_iteration(trace), spec)
    if step is not None:
        ops = ops.filter(pl.col("step") == step)
    return roofline_of(ops, require_roofs(spec, trace), by, module_calls(trace, step) if by == "module" else None)


def own_op_roofline(trace: Trace, spec: GpuSpec | None, own: tuple[int, int]) -> pl.DataFrame:
    """:func:`op_roofline` of the op calls starting in ``own`` ([lo, hi) ns):
    a window's own part of a trace read a step window at a time (the caller
    leaves out the previous iteration's tail first, as :func:`roofline_by` does)."""
    rows = op_roofline(trace, spec)
    return rows.join(trace.ops.select("op_id", "ts"), on="op_id", how="left").filter(starts_in(own)).drop("ts")


#: Forward calls per module where none are known.
_NO_CALLS = pl.DataFrame(schema={"module": pl.String, "calls": pl.UInt32})


def roofline_of(ops: pl.DataFrame, spec: GpuSpec, by: str = "op", calls: pl.DataFrame | None = None) -> pl.DataFrame:
    """:func:`roofline_by` from op calls as :func:`op_roofline` gives them (a
    trace's, or the own calls of each window of a trace read a step window at
    a time); ``calls``: the forward calls per module (``module, calls``) that
    a table by module shows."""
    keys = GROUP_KEYS[by]
    ops = ops.with_columns(pl.col(k).fill_null(f"(no {k})") for k in keys if k in ("module", "source"))
    known = pl.col("ideal_us").is_not_null()
    out = ops.group_by(keys).agg(
        calls=pl.len(),
        device_us=pl.col("device_us").sum(),
        _known_us=pl.col("device_us").filter(known).sum(),
        ideal_us=pl.when(known.any()).then(pl.col("ideal_us").sum()),
        lost_us=pl.col("lost_us").sum(),
        lost_75_us=pl.col("lost_75_us").sum(),
        flops=pl.col("flops").sum(),
        bytes=pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()),
        bound=pl.col("bound").sort_by("ideal_us", descending=True, nulls_last=True).first(),
        precision=pl.col("precision").sort_by("flops", "device_us", descending=True).first(),
        ceiling=pl.col("ceiling").sort_by("flops", "device_us", descending=True).first(),
        assumed_us=pl.col("device_us").filter(pl.col("ceiling_assumed")).sum(),
        **_measured_sums(ops),
    )
    out = out.with_columns(
        ceiling=pl.when(pl.col("flops") > 0).then(pl.col("ceiling")),
        pct_of_roof=_PCT_OF_ROOF,
        intensity=pl.when(pl.col("bytes") > 0).then(pl.col("flops") / pl.col("bytes")),
        achieved_tflops=pl.col("flops") / pl.col("device_us") / 1e6,
        achieved_gbps=pl.col("bytes") / pl.col("device_us") / 1e3,
    )
    out = out.with_columns(bound=_group_bound(out, spec), beats_model=beats_model())
    cols = [*keys, "calls", "device_us", "ideal_us", "pct_of_roof", BEATS_MODEL, "lost_us", "lost_75_us", "flops", "bytes",
            "intensity", "achieved_tflops", "achieved_gbps", "bound", "precision", "ceiling", "assumed_us"]  # fmt: skip
    if "measured_bytes" in ops.columns:
        out = out.with_columns(
            bytes_ratio=pl.when(pl.col("_b") > 0).then(pl.col("_mb") / pl.col("_b"))
        ).drop("_b", "_mb")
        cols += ["measured_flops", "measured_bytes", "bytes_ratio"]
    out = out.select(cols).sort(["lost_us", *keys], descending=[True] + [False] * len(keys), nulls_last=True)
    if by == "module":
        return with_calls(out, calls if calls is not None else _NO_CALLS)  # calls: times the module ran; ops: calls carrying work
    return out.rename({"name": "op"}) if "name" in keys else out


def _group_bound(out: pl.DataFrame, spec: GpuSpec) -> pl.Expr:
    """``compute`` where a group's intensity reaches the ridge point (peak over
    DRAM bandwidth) of its ceiling, else ``memory``; none where its roof is unknown."""
    bw = float(spec.dram_gbps or 0.0)
    if spec.peak_override_tflops is not None:
        peak = pl.lit(spec.peak_override_tflops, pl.Float64)
    else:
        peaks = {c: peak_tflops(spec, c) for c in out["ceiling"].drop_nulls().unique().to_list()}
        peak = pl.col("ceiling").replace_strict(peaks, default=None, return_dtype=pl.Float64)
    ridge = peak * 1e3 / bw  # FLOP/byte: TFLOP/s over GB/s
    return (
        pl.when(pl.col("ideal_us").is_null()).then(None)
        .when(pl.col("flops") <= 0).then(pl.lit("memory"))
        .when(pl.col("intensity").is_null()).then(pl.lit("compute"))
        .when(pl.col("intensity") >= ridge).then(pl.lit("compute"))
        .when(ridge.is_not_null()).then(pl.lit("memory"))
        .otherwise(pl.col("bound"))
    )


def ceiling_caveats(ops: pl.DataFrame) -> pl.DataFrame:
    """Op calls with FLOPs whose compute ceiling is assumed or unknown, from
    :func:`op_roofline`: ``caveat`` (``assumed`` or ``none``), ``calls``,
    ``device_us``, ``ops`` (their names, most device time first).

    Views print these beside any roofline number: an assumed ceiling makes
    its percent a floor, no ceiling leaves the calls out of time lost.
    """
    flagged = ops.filter(pl.col("flops") > 0).with_columns(
        caveat=pl.when(pl.col("ceiling_assumed")).then(pl.lit("assumed")).when(pl.col("ceiling").is_null()).then(pl.lit("none"))
    )
    flagged = flagged.filter(pl.col("caveat").is_not_null())
    by_name = flagged.group_by("caveat", "name").agg(calls=pl.len(), device_us=pl.col("device_us").sum())
    return (
        by_name.sort("device_us", descending=True)
        .group_by("caveat", maintain_order=True)
        .agg(calls=pl.col("calls").sum(), device_us=pl.col("device_us").sum(), ops=pl.col("name"))
        .sort("caveat")
    )


def _measured_sums(ops: pl.DataFrame) -> dict[str, pl.Expr]:
    """Group sums of the measured columns (when the trace has counters); the
    bytes ratio is taken over the calls with both a measured and a modeled count."""
    if "measured_bytes" not in ops.columns:
        return {}
    both = pl.col("measured_bytes").is_not_null() & (pl.col("bytes") > 0)
    return {
        "measured_flops": pl.when(pl.col("measured_flops").is_not_null().any()).then(pl.col("measured_flops").sum()),
        "measured_bytes": pl.when(pl.col("measured_bytes").is_not_null().any()).then(pl.col("measured_bytes").sum()),
        "_b": pl.col("bytes").filter(both).sum(),
        "_mb": pl.col("measured_bytes").filter(both).sum(),
    }


#: Columns :func:`with_time_lost` adds to an op statistics table.
LOST_COLUMNS = ("lost_us", "pct_of_roof")


def launched_roofline_by(trace: Trace, spec: GpuSpec | None, by: str = "op", *, step: int | None = None) -> pl.DataFrame:
    """``lost_us`` and ``pct_of_roof`` of op calls by the kernels they launched
    themselves (their *self* time), grouped ``by`` op or op and shapes.

    :func:`roofline_by` books a call's roof on the op carrying its work
    (``aten::relu``), with the time of every kernel inside it; a table ranked
    by self time shows the kernel under the op that launched it
    (``aten::clamp_min``), so its roof is taken from the same kernels
    (:func:`kernel_roofline`, their shares of the carrier's work).  A call
    loses what its kernels took past their summed ideal time.
    """
    keys = GROUP_KEYS[by]
    trace = without_earlier_iteration(trace)
    from kinetolens.analysis.workload.params import shapes_expr

    k = kernel_roofline(trace, spec).select("kernel_id", "dur_us", "ideal_us")
    k = k.join(trace.kernels.select("kernel_id", "op_id"), on="kernel_id", how="inner")
    known = pl.col("ideal_us").is_not_null()
    calls = k.group_by("op_id").agg(
        _known_us=pl.col("dur_us").filter(known).sum(),
        ideal_us=pl.when(known.any()).then(pl.col("ideal_us").sum()),
    )
    meta = trace.ops.select("op_id", "name", "step", shapes_expr().alias("shapes"))
    calls = calls.join(meta, on="op_id", how="inner")
    if step is not None:
        calls = calls.filter(pl.col("step") == step)
    return calls.group_by(keys).agg(
        lost_us=pl.when(pl.col("ideal_us").is_not_null().any()).then(
            (pl.col("_known_us") - pl.col("ideal_us")).clip(lower_bound=0.0).sum()
        ),
        pct_of_roof=pl.col("ideal_us").sum() / pl.when(pl.col("_known_us").sum() > 0).then(pl.col("_known_us").sum()) * 100.0,
    )


def with_time_lost(
    stats: pl.DataFrame, trace: Trace, spec: GpuSpec, by: str = "op", *, step: int | None = None, inclusive: bool = False
) -> pl.DataFrame:
    """``stats`` (an :func:`kinetolens.analysis.workload.ops.op_stats` table grouped
    ``by``) with :func:`roofline_by`'s ``lost_us`` and ``pct_of_roof`` joined
    on its key.

    Groups with no call carrying work get nulls: ``aten::linear`` runs its
    work in ``aten::addmm``, where the time lost is counted.  ``lost_us`` is
    always the group's total, whatever aggregate ``stats`` took of its
    times.  Groupings without a roofline key (``kernel``) are returned as
    they are.  Op groupings ranked by self time (not ``inclusive``) take
    the roof of the kernels each op launched itself (:func:`launched_roofline_by`),
    so a row's time, work and roof cover the same kernels.
    """
    if by not in GROUP_KEYS:
        return stats
    keys = GROUP_KEYS[by]
    if by in ("op", "op+shape") and not inclusive:
        lost = launched_roofline_by(trace, spec, by, step=step).select(*keys, *LOST_COLUMNS)
    else:
        lost = roofline_by(trace, spec, by, step=step).rename({"op": "name"}, strict=False).select(*keys, *LOST_COLUMNS)
    filled = {k: f"(no {k})" for k in keys if k in ("module", "source")}
    joined = stats.with_columns(pl.col(k).fill_null(v).alias(f"_key_{k}") for k, v in filled.items())
    left_on = [f"_key_{k}" if k in filled else k for k in keys]
    joined = joined.join(lost, left_on=left_on, right_on=keys, how="left", maintain_order="left")
    return joined.drop([f"_key_{k}" for k in filled], strict=False)


#: How :func:`kernel_groups` can group kernels.
KERNEL_GROUPS = ("name", "name+op")


def kernel_groups(table: pl.DataFrame, roof: pl.DataFrame | None, by: str = "name") -> pl.DataFrame:
    """Kernels of a :func:`~kinetolens.analysis.hardware.kernels.kernel_table` grouped by
    name (``by="name"``) or name and op, with Tensor Cores, occupancy, work,
    achieved TFLOP/s and percent of roofline.

    ``roof`` is :func:`kernel_roofline` of the same trace (None when the GPU
    is unknown: no percent of roofline).  ``pct_of_roof`` is the summed ideal
    time over the summed time of the kernels whose roof is known; ``op`` (by
    name) lists the ops that launched the kernel, with counts.
    """
    if by not in KERNEL_GROUPS:
        raise ValueError(f"unknown grouping {by!r}; choose from {', '.join(KERNEL_GROUPS)}")
    if roof is not None:
        ideal = roof.select(pl.col("kernel_id").alias("idx"), pl.col("ideal_us").alias("_ideal_us"))
        table = table.join(ideal, on="idx", how="left")
    else:
        table = table.with_columns(_ideal_us=pl.lit(None, pl.Float64))
    keys = ["kernel"] if by == "name" else ["kernel", "op"]
    known = pl.col("_ideal_us").is_not_null()
    out = table.group_by(keys).agg(
        calls=pl.len(),
        total_us=pl.col("dur_us").sum(),
        mean_us=pl.col("dur_us").mean(),
        max_us=pl.col("dur_us").max(),
        min_us=pl.col("dur_us").min(),
        tc=pl.col("tc").mode().sort().first(),  # ties: the first in order (a mode lists its ties in no set order)
        blocks_per_sm=weighted_mean("blocks_per_sm", "dur_us"),
        occupancy=weighted_mean("occupancy", "dur_us"),
        flops=pl.col("flops").sum(),
        bytes=pl.col("bytes").sum(),
        _ideal=pl.col("_ideal_us").filter(known).sum(),
        _known=pl.col("dur_us").filter(known).sum(),
        **({} if by == "name+op" else {"op": counts("op", missing="(no op)")}),
        **({"short_name": pl.col("short_name").first()} if "short_name" in table.columns else {}),
    )
    if by == "name":
        out = out.with_columns(listed("op"))
    return out.with_columns(
        tflops_s=pl.when(pl.col("total_us") > 0).then(pl.col("flops") / pl.col("total_us") / 1e6),
        pct_of_roof=pl.when(pl.col("_known") > 0).then(pl.col("_ideal") / pl.col("_known") * 100.0),
    ).drop("_ideal", "_known").sort("total_us", descending=True)
