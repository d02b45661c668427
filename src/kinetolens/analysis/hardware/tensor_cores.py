"""Tensor Core use per kernel, and Tensor Core eligibility per matrix op.

* :func:`kernel_tensor_cores`: ``yes``/``no``/``unknown`` for every GPU
  activity, from the kernel-name rules in :mod:`kinetolens.registry.tensor_cores`,
  overridden by measured Tensor Core instruction counters (CUPTI range
  profiler) for kernel names the trace has counters for.
* :func:`op_tensor_core_eligibility`: for every matrix op (mm, addmm, bmm,
  matmul, linear, convolutions, scaled-dot-product attention, ``_scaled_mm``
  ...), whether its dtype can use Tensor Cores on the trace's GPU under
  PyTorch's defaults, whether its shapes let them run efficiently (NVIDIA's
  Tensor Core performance guide: GEMM M/N/K and convolution C/K multiples of
  16 bytes' worth of elements: 8 for fp16/bf16, 16 for int8/fp8, 4 for
  TF32), and a flag when an eligible op ran only on non-Tensor-Core kernels.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from kinetolens.analysis.hardware.gpu_spec import trace_device
from kinetolens.analysis.session import per_trace
from kinetolens.model.ids import rows_by_id
from kinetolens.model.nesting import outermost_marked
from kinetolens.model.trace import Trace
from kinetolens.model.vocabulary import matrix_ops
from kinetolens.registry.dtypes import canonical
from kinetolens.registry.flops import REGISTRY, OpArgs
from kinetolens.registry.flops_base import json_list
from kinetolens.registry.tensor_cores import NO, UNKNOWN, YES, classify, deciding_tensor_counters

# -- per kernel ------------------------------------------------------------------


def counter_verdicts(trace: Trace) -> pl.DataFrame:
    """``name -> tc`` from measured Tensor Core math or instruction counters.

    A kernel name's binary either issues Tensor Core instructions or not, so
    one range with a non-zero count makes the name ``yes``; all measured
    ranges at zero make it ``no``.  Names without a Tensor Core counter are
    absent (their verdict stays with the name rules).
    """
    c = trace.kernel_counters
    schema = {"name": pl.String, "tc_counters": pl.String}
    if c.height == 0:
        return pl.DataFrame(schema=schema)
    tensor = c.filter(pl.col("metric").is_in(deciding_tensor_counters(c["metric"].unique().to_list())))
    if tensor.height == 0:
        return pl.DataFrame(schema=schema)
    return (
        tensor.group_by("name")
        .agg(pl.col("value").max().alias("max"))
        .select("name", tc_counters=pl.when(pl.col("max") > 0).then(pl.lit(YES)).otherwise(pl.lit(NO)))
    )


def name_verdicts(names: pl.Series) -> pl.DataFrame:
    """(name, tc, tc_reason) for each distinct name, by the registry rules."""
    unique = names.drop_nulls().unique().to_list()
    pairs = [classify(n) for n in unique]
    return pl.DataFrame(
        {"name": unique, "tc": [v for v, _ in pairs], "tc_reason": [r for _, r in pairs]},
        schema={"name": pl.String, "tc": pl.String, "tc_reason": pl.String},
    )


@per_trace
def kernel_tensor_cores(trace: Trace) -> pl.DataFrame:
    """One row per GPU activity: ``kernel_id, name, kind, tc, tc_reason, tc_source``.

    ``tc_source`` is ``counters`` (measured), ``name`` (rules) or ``kind``
    (memcpy/memset never use Tensor Cores).
    """
    k = trace.kernels.select("kernel_id", "name", pl.col("kind").cast(pl.String))
    if not k["kernel_id"].is_sorted():
        k = k.sort("kernel_id")
    # Each distinct verdict is one row of ``choices`` (a name's, a copy's, no
    # name's) and each kernel takes its row by number: the result, kept for
    # the trace's life, points at a few shared texts, and its ids and names
    # are the trace's own columns, not sorted copies.
    by_name = name_verdicts(k["name"]).join(counter_verdicts(trace), on="name", how="left")
    measured = pl.col("tc_counters").is_not_null()
    choices = pl.concat([
        by_name.select(
            tc=pl.coalesce("tc_counters", "tc"),
            tc_reason=pl.when(measured).then(pl.lit("measured Tensor Core instructions (CUPTI)")).otherwise("tc_reason"),
            tc_source=pl.when(measured).then(pl.lit("counters")).otherwise(pl.lit("name")),
        ),
        pl.DataFrame({"tc": [NO, UNKNOWN], "tc_reason": ["memory copy / fill", "no kernel name"], "tc_source": ["kind", "name"]}),
    ]).rechunk()  # one chunk: a gather over several copies every row's text
    copy_row, no_name_row = by_name.height, by_name.height + 1
    names = by_name.select("name", row=pl.int_range(pl.len(), dtype=pl.UInt32))
    row = k.select("name").join(names, on="name", how="left", maintain_order="left")["row"]
    memory = k["kind"].is_in(["memcpy", "memset"])
    row = pl.select(pl.when(memory).then(copy_row).otherwise(row.fill_null(no_name_row)).cast(pl.UInt32)).to_series()
    return k.hstack([choices[c].gather(row) for c in choices.columns])


# -- per op ------------------------------------------------------------------------

#: Where the operands of the matrix ops whose alignment is checked are
#: (which ops are matrix ops: :func:`kinetolens.model.vocabulary.matrix_ops`).
#: GEMMs: name -> index of the first and second operand.
GEMM_OPS: dict[str, tuple[int, int]] = {
    "aten::mm": (0, 1),
    "aten::addmm": (1, 2),
    "aten::bmm": (0, 1),
    "aten::baddbmm": (1, 2),
    "aten::addbmm": (1, 2),
    "aten::matmul": (0, 1),
    "aten::_scaled_mm": (0, 1),
    "aten::_int_mm": (0, 1),
    "aten::linear": (0, 1),  # weight is [N, K]
}
CONV_OPS = {
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::convolution",
    "aten::_convolution",
    "aten::cudnn_convolution",
    "aten::conv_transpose1d",
    "aten::conv_transpose2d",
    "aten::conv_transpose3d",
    "aten::cudnn_convolution_transpose",
    "aten::convolution_backward",
}
ATTENTION_OPS = {
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_flash_attention_forward",
    "aten::_efficient_attention_forward",
    "aten::_scaled_dot_product_flash_attention_backward",
    "aten::_scaled_dot_product_efficient_attention_backward",
    "aten::_scaled_dot_product_cudnn_attention_backward",
    "aten::_flash_attention_backward",
    "aten::_efficient_attention_backward",
}

#: Elements per 16 bytes: the dimension multiple Tensor Cores want.
ALIGN = {"fp16": 8, "bf16": 8, "fp8": 16, "int8": 16, "uint8": 16, "fp32": 4}
#: Minimum compute capability for each Tensor Core input type (NVIDIA).
MIN_CC = {"fp16": (7, 0), "int8": (7, 2), "uint8": (7, 2), "bf16": (8, 0), "fp32": (8, 0), "fp8": (8, 9), "fp4x2": (10, 0)}


def _shape(dims: list[Any], i: int) -> tuple[int, ...] | None:
    if i >= len(dims) or not isinstance(dims[i], list) or not dims[i]:
        return None
    if not all(isinstance(d, int) for d in dims[i]):
        return None
    return tuple(dims[i])


def matrix_dims(name: str, dims: list[Any]) -> dict[str, int] | None:
    """The dimensions Tensor Core alignment is about, by op family."""
    if name in GEMM_OPS:
        ia, ib = GEMM_OPS[name]
        a, b = _shape(dims, ia), _shape(dims, ib)
        if a is None or b is None:
            return None
        if name == "aten::linear":
            return {"M": math.prod(a[:-1]), "N": b[0], "K": a[-1]}
        m = a[-2] if len(a) >= 2 else 1
        n = b[-1] if len(b) >= 2 else 1
        return {"M": m, "N": n, "K": a[-1]}
    if name in CONV_OPS:
        if name == "aten::convolution_backward":
            x, w = _shape(dims, 1), _shape(dims, 2)
        else:
            x, w = _shape(dims, 0), _shape(dims, 1)
        if x is None or w is None or len(x) < 2:
            return None
        out_channels = w[1] if "transpose" in name else w[0]
        return {"C": x[1], "K": out_channels}
    if name in ATTENTION_OPS:
        q = _shape(dims, 1 if name.endswith("_backward") else 0)
        return {"head_dim": q[-1]} if q else None
    return None


def matrix_dtype(name: str, dims: list[Any], types: list[Any]) -> str | None:
    """The precision a matrix op computes in: its first matrix operand's
    dtype (the bias of ``addmm``/``baddbmm``, the gradient of a backward op
    skipped), as a canonical name; the registry's word where the op names
    it (an ``out`` first, FP4 stored as ``uint8``)."""
    entry = REGISTRY.get(name)
    if entry is not None and entry.precision is not None:
        return entry.precision(OpArgs(name, dims, types, []))
    first = 1 if name in ("aten::addmm", "aten::baddbmm", "aten::addbmm") else 0
    if name == "aten::convolution_backward" or (name in ATTENTION_OPS and name.endswith("_backward")):
        first = 1
    for t in types[first:] + types[:first]:
        d = canonical(str(t)) if t else None
        if d is not None:
            return d
    return None


def _capability(device: dict[str, Any] | None) -> tuple[int, int] | None:
    """NVIDIA compute capability; None when unknown or not NVIDIA (ROCm
    reports gfx versions in the same fields, which mean something else)."""
    if not device or "AMD" in str(device.get("name", "")):
        return None
    major, minor = device.get("computeMajor"), device.get("computeMinor")
    if isinstance(major, int) and isinstance(minor, int) and major > 0:
        return major, minor
    return None


def _is_conv(name: str) -> bool:
    entry = REGISTRY.get(name)
    return entry is not None and entry.family == "conv"


def eligibility(name: str, dtype: str | None, cc: tuple[int, int] | None) -> tuple[bool | None, str]:
    """(eligible, why) under PyTorch defaults on a GPU of compute capability ``cc``."""
    if dtype is None:
        return None, "dtype not recorded (record_shapes=False)"
    if dtype == "fp32":
        if cc is not None and cc < MIN_CC["fp32"]:
            return False, "fp32: TF32 Tensor Cores need compute capability 8.0+"
        if _is_conv(name):
            return True, "fp32 conv: TF32 (torch.backends.cudnn.allow_tf32, on by default)"
        return True, "fp32 matmul: TF32 when enabled (torch.set_float32_matmul_precision('high'); off by default since PyTorch 1.12)"
    if dtype not in MIN_CC:
        return False, f"{dtype}: no Tensor Core path in PyTorch"
    if cc is not None and cc < MIN_CC[dtype]:
        need = ".".join(map(str, MIN_CC[dtype]))
        return False, f"{dtype} Tensor Cores need compute capability {need}+"
    return True, f"{dtype} matrix op"


def _misaligned(dims: dict[str, int] | None, dtype: str | None) -> list[str]:
    if not dims or dtype not in ALIGN:
        return []
    align = ALIGN[dtype]
    return [f"{k}={v}" for k, v in dims.items() if v % align]


def matrix_roots(ops: pl.DataFrame) -> pl.Series:
    """Each op's outermost matrix-op ancestor-or-self (null outside matrix ops).

    ``aten::linear -> aten::addmm`` is one matrix op (the linear).
    """
    matrix = ops["name"].is_in(sorted(matrix_ops()))
    if not matrix.any():
        return pl.repeat(None, ops.height, dtype=pl.Int64, eager=True).alias("root")
    rows = ops.select("op_id").with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    parent = rows_by_id(rows, "op_id", ops["parent_id"], ["row"])
    root_row = outermost_marked(parent["row"], matrix)
    return ops["op_id"].gather(root_row).alias("root").cast(pl.Int64)


_SHAPE_FACTS = {
    "name": pl.String, "input_dims": pl.String, "input_types": pl.String, "dtype": pl.String, "dims": pl.String,
    "eligible": pl.Boolean, "eligible_reason": pl.String, "align": pl.Int64, "shapes_ok": pl.Boolean,
    "misaligned": pl.String, "misaligned_reason": pl.String,
}  # fmt: skip


def _shape_facts(name: str, dims_text: str | None, types_text: str | None, cc: tuple[int, int] | None) -> tuple:
    """What one distinct (op, shapes, dtypes) call says about Tensor Cores, in ``_SHAPE_FACTS`` order."""
    dims_list, types = json_list(dims_text), json_list(types_text)
    dims = matrix_dims(name, dims_list)
    dtype = matrix_dtype(name, dims_list, types)
    eligible, why = eligibility(name, dtype, cc)
    bad = _misaligned(dims, dtype) if eligible else []
    return (
        name,
        dims_text,
        types_text,
        dtype,
        " ".join(f"{k}={v}" for k, v in dims.items()) if dims else None,
        eligible,
        why,
        ALIGN.get(dtype) if eligible and dtype else None,
        (not bad) if (eligible and dims) else None,
        ", ".join(bad) or None,
        f"{', '.join(bad)} not a multiple of {ALIGN[dtype]}" if bad else None,  # type: ignore[index]
    )


@per_trace
def op_tensor_core_eligibility(trace: Trace) -> pl.DataFrame:
    """One row per matrix op call (outermost, so linear -> addmm is one row).

    Columns: ``op_id, op, dtype, dims, eligible, eligible_reason, align,
    shapes_ok, misaligned, kernels, kernel_time_us, tc_time_us, tc, flagged,
    flag_reason``.  ``flagged`` is true when the op could use Tensor Cores
    but all its kernels are known not to.  The shape rules run once per
    distinct (op, shapes, dtypes): a training run repeats the same calls
    every step.
    """
    ops = trace.ops.select("op_id", "name", "parent_id", "input_dims", "input_types")
    schema = {
        "op_id": pl.Int64, "op": pl.String, "dtype": pl.String, "dims": pl.String, "eligible": pl.Boolean,
        "eligible_reason": pl.String, "align": pl.Int64, "shapes_ok": pl.Boolean, "misaligned": pl.String,
        "kernels": pl.Int64, "kernel_time_us": pl.Float64, "tc_time_us": pl.Float64, "tc": pl.String,
        "flagged": pl.Boolean, "flag_reason": pl.String,
    }  # fmt: skip
    if ops.height == 0:
        return pl.DataFrame(schema=schema)
    ops = ops.with_columns(matrix_roots(ops))
    matrix = ops.filter(pl.col("root") == pl.col("op_id")).select("op_id", "name", "input_dims", "input_types")
    if matrix.height == 0:
        return pl.DataFrame(schema=schema)
    tc = kernel_tensor_cores(trace).select("kernel_id", "tc")
    kernels = (
        trace.kernels.select("kind", "kernel_id", "op_id", "dur")  # the columns first: a filter copies each
        .filter(pl.col("kind") == "kernel")
        .drop("kind")
        .join(ops.select("op_id", "root"), on="op_id", how="inner")
        .filter(pl.col("root").is_not_null())
        .join(tc, on="kernel_id", how="left")
    )
    per_root = kernels.group_by("root").agg(
        pl.len().cast(pl.Int64).alias("kernels"),
        (pl.col("dur").sum() / 1000.0).alias("kernel_time_us"),
        (pl.col("dur").filter(pl.col("tc") == YES).sum() / 1000.0).alias("tc_time_us"),
        # An op runs on Tensor Cores if any kernel does, not at all only if every kernel is known not to.
        pl.when((pl.col("tc") == YES).any())
        .then(pl.lit(YES))
        .when(pl.col("tc").eq_missing(NO).all())
        .then(pl.lit(NO))
        .otherwise(pl.lit(UNKNOWN))
        .alias("tc"),
    )
    cc = _capability(trace_device(trace))
    distinct = matrix.select("name", "input_dims", "input_types").unique()
    facts = pl.DataFrame([_shape_facts(*r, cc) for r in distinct.iter_rows()], schema=_SHAPE_FACTS, orient="row")
    keys = ["name", "input_dims", "input_types"]
    rows = (
        matrix.join(facts, on=keys, how="left", nulls_equal=True, maintain_order="left")
        .join(per_root, left_on="op_id", right_on="root", how="left", maintain_order="left")
        .with_columns(
            pl.col("kernels").fill_null(0),
            pl.col("kernel_time_us").fill_null(0.0),
            pl.col("tc_time_us").fill_null(0.0),
            pl.col("tc").fill_null(UNKNOWN),
        )
        .with_columns(flagged=pl.col("eligible").fill_null(False) & (pl.col("tc") == NO))
    )
    flag_text = pl.when(pl.col("dtype") == "fp32").then(pl.lit(" (TF32 off?)")).otherwise(pl.lit(""))
    flag_reason = pl.concat_str(
        [
            pl.when("flagged").then(pl.lit("eligible but ran on non-Tensor-Core kernels") + flag_text),
            pl.col("misaligned_reason"),
        ],
        separator="; ",
        ignore_nulls=True,
    )
    return rows.select(
        "op_id",
        op="name",
        **{c: c for c in ("dtype", "dims", "eligible", "eligible_reason", "align", "shapes_ok", "misaligned")},
        **{c: c for c in ("kernels", "kernel_time_us", "tc_time_us", "tc", "flagged")},
        flag_reason=pl.when(flag_reason != "").then(flag_reason),
    ).cast(schema)
