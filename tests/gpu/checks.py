"""The checks a CUDA trace recorded by kinetolens must pass.

One set of functions for both places they run: ``tests/gpu/`` applies them
to the trace it has just captured on the GPU, and ``tests/gpu_recorded/test_gpu_recorded.py``
applies them, on any machine, to the traces the suite recorded into
``tests/data/gpu/``.  Each function takes a loaded trace (plus the figures
torch itself reported during the capture, kept in the recording's
``.expect.json``), asserts, and returns what it measured so the suite can
report it.

Pure polars over the analysis' own outputs; no torch, so CPU CI can run them.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl

import kinetolens
from kinetolens.analysis.hardware.compiled_kernels import compiled_kernel_table
from kinetolens.analysis.hardware.counters import DRAM_COUNTERS, FLOP_COUNTERS, counter_table
from kinetolens.analysis.hardware.kernels import kernel_table
from kinetolens.analysis.memory.usage import peak_memory
from kinetolens.analysis.summary import attribution, unrecorded_launches
from kinetolens.analysis.workload.work import carried_work, op_work
from kinetolens.model.ncu_pairing import launch_ordered_kernels
from kinetolens.registry.tensor_cores import NO, TENSOR_COUNTER, YES, classify

#: The bars a GPU capture must reach (the same as the attribution health check's).
OP_SHARE = 0.99
MODULE_SHARE = 0.95
BACKWARD_SHARE = 0.95
MEMORY_TOLERANCE = 0.05
#: The most Tensor Core math a GEMM kernel may do over its op's 2MNK: tiles
#: that overhang the matrix compute the padding too.
TILE_PADDING = 1.25

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
#: What each check needs from the recording's ``.expect.json`` besides the trace.
CHECKS = ("attribution", "tensor_cores", "gemm_flops", "attention_flops", "memory_peak", "graph_replay",
          "counters", "pm_samples", "compiled", "ncu_counters")  # fmt: skip


def _share(frame: pl.DataFrame, condition: pl.Expr) -> float | None:
    total = frame["dur"].sum() if frame.height else 0
    return float(frame.filter(condition)["dur"].sum()) / float(total) if total else None


def compute_kernels(trace: kinetolens.Trace) -> pl.DataFrame:
    return trace.kernels.filter(pl.col("kind") == "kernel")


# -- attribution -------------------------------------------------------------


def attribution_shares(trace: kinetolens.Trace) -> dict[str, Any]:
    """Shares of kernel time tied to an op, to a module, and (backward) to
    the forward op.

    The op share is over kernels whose launch the trace holds (the summary's
    ``op_of_recorded_launches``): a kernel still running from a step before
    the window has no launch in the file, so no tool can name its op; that
    share is reported beside it.  The module share is over forward and
    backward kernels: an optimizer's kernels run outside every ``nn.Module``
    by definition, so counting them would measure the optimizer's weight in
    the step, not attribution.
    """
    kernels = compute_kernels(trace)
    attr = attribution(trace)
    model = kernels.filter(pl.col("direction").is_in(["fprop", "bprop"]))
    return {
        "kernels": kernels.height,
        "kernel_time_us": attr.kernel_time_us,
        "op": attr.op_of_recorded_launches,
        "op_of_all_kernels": attr.op,
        "launched_before_window": unrecorded_launches(trace).share or 0.0,
        "module_of_model_kernels": _share(model, pl.col("module").is_not_null()),
        "module_of_all_kernels": attr.module,
        "backward_time_us": attr.backward_time_us,
        "backward_with_forward_op": attr.backward_with_forward_op,
    }


def check_attribution(trace: kinetolens.Trace, *, backward: bool = True) -> dict[str, Any]:
    """Kernels to an op >= 99%, forward/backward kernels to a module >= 95%,
    backward kernels to their forward op >= 95% of kernel time."""
    got = attribution_shares(trace)
    assert got["kernels"] > 0, "no GPU kernels in the trace"
    assert got["op"] is not None and got["op"] >= OP_SHARE, got
    assert got["module_of_model_kernels"] is not None and got["module_of_model_kernels"] >= MODULE_SHARE, got
    if backward:
        assert got["backward_time_us"] > 0, f"no backward kernels: {got}"
        assert got["backward_with_forward_op"] is not None and got["backward_with_forward_op"] >= BACKWARD_SHARE, got
    return got


# -- Tensor Cores ----------------------------------------------------------------


def check_tensor_cores(trace: kinetolens.Trace) -> dict[str, Any]:
    """The ``tc`` column of ``kinetolens kernels``: every bf16 GEMM call has
    its matrix product on a kernel marked yes, none of its kernels is left
    unknown, and every fp32 elementwise kernel is marked no.

    Per call, not per kernel: a GEMM may add a kernel that does no matrix
    math (cuBLAS' split-K reduction, cuBLASLt's standalone epilogue), and
    that one is rightly ``no``.
    """
    table = kernel_table(trace).filter(pl.col("kind") == "kernel")
    table = table.join(trace.kernels.select(idx="kernel_id", op_id="op_id"), on="idx", how="left")
    gemm = table.filter(pl.col("op").is_in(GEMM_OPS) & pl.col("params").str.contains("BFloat16"))
    fp32 = pl.col("params").str.contains(r"\bfloat\b") & ~pl.col("params").str.contains("BFloat16|Half")
    elementwise = table.filter(pl.col("kernel").str.contains("elementwise") & fp32)
    assert gemm.height > 0, "no bf16 GEMM kernels in the trace"
    assert elementwise.height > 0, "no fp32 elementwise kernels in the trace"
    calls = gemm.group_by("op_id").agg(pl.col("op").first(), yes=(pl.col("tc") == "yes").any(), kernels=pl.col("kernel"))
    without = calls.filter(~pl.col("yes"))
    assert without.height == 0, f"bf16 GEMM calls without a tc=yes kernel: {without.select('op', 'kernels').head(5).rows()}"
    unknown = gemm.filter(pl.col("tc") == "unknown").select("op", "kernel").unique()
    assert unknown.height == 0, f"bf16 GEMM kernels with tc unknown: {unknown.rows()}"
    wrong = elementwise.filter(pl.col("tc") != "no").select("op", "kernel", "tc").unique()
    assert wrong.height == 0, f"fp32 elementwise kernels without tc=no: {wrong.rows()}"
    return {
        "bf16_gemm_calls": calls.height,
        "bf16_gemm_kernels": gemm.height,
        "bf16_gemm_tc_names": sorted(set(gemm.filter(pl.col("tc") == "yes")["kernel"].to_list()))[:8],
        "bf16_gemm_other_kernels": sorted(set(gemm.filter(pl.col("tc") != "yes")["kernel"].to_list()))[:8],
        "fp32_elementwise_kernels": elementwise.height,
    }


# -- FLOPs -----------------------------------------------------------------------


def flops_per_step(trace: kinetolens.Trace) -> tuple[dict[str, float], int]:
    """kinetolens' FLOPs per op name, averaged over the trace's complete
    steps, and the number of those steps."""
    steps = trace.steps.filter(pl.col("complete"))["step"].to_list()
    assert steps, "no complete step in the trace"
    work = op_work(trace).join(trace.ops.select("op_id", "name", "step"), on="op_id")
    work = work.filter(pl.col("step").is_in(steps))
    total: dict[str, float] = defaultdict(float)
    for name, flops in work.select("name", "flops").iter_rows():
        total[name] += flops or 0.0
    return {name: value / len(steps) for name, value in total.items()}, len(steps)


def check_gemm_flops(trace: kinetolens.Trace, flop_counter: dict[str, float]) -> dict[str, Any]:
    """Per step, each GEMM op's FLOPs equal FlopCounterMode's for the same
    model and step (``flop_counter``: its counts, by op name)."""
    ours, steps = flops_per_step(trace)
    theirs = {name: v for name, v in flop_counter.items() if name in GEMM_OPS}
    assert theirs, f"FlopCounterMode counted no GEMM: {flop_counter}"
    for name in GEMM_OPS:
        assert ours.get(name, 0.0) == theirs.get(name, 0.0), (name, ours.get(name), theirs.get(name))
    return {"steps": steps, "gemm_flops_per_step": {n: ours.get(n, 0.0) for n in sorted(theirs)}}


def attention_flops(names: dict[str, float]) -> float:
    """FLOPs of the fused attention ops among ``names`` (op name -> FLOPs)."""
    return sum(v for name, v in names.items() if "attention" in name)


def check_attention_flops(trace: kinetolens.Trace, flop_counter: dict[str, float]) -> dict[str, Any]:
    """The fused attention ops' FLOPs per step equal FlopCounterMode's.

    Compared as a total, not per name: FlopCounterMode counts the op it is
    dispatched (``_scaled_dot_product_flash_attention``), kinetolens the
    innermost op that carries the work (``_flash_attention_forward`` under
    it), the same work under two names.
    """
    ours, _ = flops_per_step(trace)
    theirs = attention_flops(flop_counter)
    assert theirs > 0, f"FlopCounterMode counted no attention: {flop_counter}"
    assert math.isclose(attention_flops(ours), theirs, rel_tol=1e-9), (
        {n: v for n, v in ours.items() if "attention" in n},
        {n: v for n, v in flop_counter.items() if "attention" in n},
    )
    return {"attention_flops_per_step": theirs}


# -- memory ------------------------------------------------------------------------


def check_memory_peak(trace: kinetolens.Trace, max_memory_allocated: int) -> dict[str, Any]:
    """The GPU's peak allocated bytes in the trace are within 5% of
    ``torch.cuda.max_memory_allocated()`` over the same window."""
    peaks = peak_memory(trace).filter(pl.col("device").str.starts_with("GPU"))
    assert peaks.height == 1, f"expected one GPU in the memory events: {peaks}"
    peak = int(peaks["peak_allocated"][0])
    ratio = peak / max_memory_allocated
    assert abs(ratio - 1) <= MEMORY_TOLERANCE, (peak, max_memory_allocated)
    return {"trace_peak_bytes": peak, "torch_max_memory_allocated": max_memory_allocated, "ratio": ratio}


# -- CUDA graphs --------------------------------------------------------------------


def check_graph_replay(trace: kinetolens.Trace) -> dict[str, Any]:
    """Kernels replayed from a CUDA graph have the op (and module) that
    launched them at capture (the trace loaded with its capture trace)."""
    attr = attribution(trace)
    kernels = compute_kernels(trace)
    replayed = kernels.filter(pl.col("graph_id").is_not_null())
    assert replayed.height > 0, "no kernel replayed from a graph"
    got = {
        "replayed_kernels": replayed.height,
        "graph_replay_time_us": attr.graph_replay_time_us,
        "with_capture_op": attr.graph_replay_with_capture_op,
        "with_module": attr.graph_replay_with_module,
        "op": attr.op,
    }
    assert got["with_capture_op"] is not None and got["with_capture_op"] >= OP_SHARE, got
    assert got["with_module"] is not None and got["with_module"] >= MODULE_SHARE, got
    # the capture ops are real ops (a GEMM among them), not the launch's annotation
    assert replayed.filter(pl.col("op").is_in(GEMM_OPS)).height > 0, replayed["op"].unique().to_list()
    return got


# -- CUPTI counters -----------------------------------------------------------------


def check_counters(trace: kinetolens.Trace) -> dict[str, Any]:
    """The ``roofline`` preset's counters were collected (DRAM bytes, the SASS
    floating-point instruction counters Kineto's ``kineto__cuda_core_flops``
    expands to, Tensor Core instructions), each profiled kernel is paired
    with its launch and op, and the bf16 GEMMs' Tensor Core verdict comes
    from the measured Tensor Core instructions."""
    collected = set(trace.kernel_counters["metric"].unique().to_list())
    assert set(DRAM_COUNTERS) <= collected, f"no DRAM byte counters among {sorted(collected)}"
    assert set(FLOP_COUNTERS) & collected, f"no SASS floating-point counters among {sorted(collected)}"
    assert any(TENSOR_COUNTER.search(m) for m in collected), f"no Tensor Core counter among {sorted(collected)}"
    table = counter_table(trace)
    assert table.height > 0
    assert table["pairing"][0] == "launch order", table["pairing"][0]
    with_op = table.filter(pl.col("bottom_level_op").is_not_null()).height / table.height
    assert with_op >= OP_SHARE, with_op
    gemm = table.filter(pl.col("bottom_level_op").is_in(GEMM_OPS))
    assert gemm.height > 0, "no GEMM among the profiled kernels"
    assert (gemm["tc_source"] == "counters").all() and (gemm["tc"] == "yes").all(), gemm.select("kernel", "tc", "tc_source")
    return {
        "profiled_kernels": table.height,
        "with_op": with_op,
        "metrics": sorted(collected),
        "dram_bytes": table["dram_bytes"].sum(),
    }


def check_ncu_counters(trace: kinetolens.Trace) -> dict[str, Any]:
    """Nsight Compute's counters of the same step, recorded in a second run
    and paired in (``kinetolens.load(..., ncu=CSV)``): every profiled kernel
    found its kernel in the trace (so its launch and op); each GEMM op's
    measured Tensor Core FLOPs equal the FLOPs kinetolens models for it, or
    exceed them by no more than tile padding (a pairing off by one kernel
    would give another GEMM's shape); and the
    Tensor Core verdict from the counters agrees with the kernel-name rules
    wherever those know."""
    unpaired = [w for w in trace.warnings if w.kind.startswith("Nsight Compute")]
    assert not unpaired, unpaired
    table = counter_table(trace)
    kernels = launch_ordered_kernels(trace).height
    assert table.height == kernels, (table.height, kernels)
    assert table["pairing"][0] == "kernel name, grid and block", table["pairing"][0]
    with_op = table.filter(pl.col("bottom_level_op").is_not_null()).height / table.height
    assert with_op >= OP_SHARE, with_op
    gemm = (
        table.filter(pl.col("bottom_level_op").is_in(GEMM_OPS))
        .group_by("op_id").agg(pl.col("tensor_flops").sum(), pl.col("bottom_level_op").first())
        .join(carried_work(trace).ops.select("op_id", modeled="flops"), on="op_id", how="left")
    )  # fmt: skip
    assert gemm.height > 0, "no GEMM among the profiled kernels"
    # Never less math than the op needs; more where the kernel's tiles pad the
    # shape (64x24 tiles over a dimension of 128 do 144/128 = 9/8 of it).
    ratio = pl.col("tensor_flops") / pl.col("modeled")
    off = gemm.filter((ratio < 1 - 1e-9) | (ratio > TILE_PADDING))
    assert off.height == 0, off
    exact = gemm.filter((ratio - 1).abs() <= 1e-9).height
    assert exact >= 0.75 * gemm.height, gemm
    by_name = table.with_columns(name_tc=pl.col("kernel").map_elements(lambda n: classify(n)[0], return_dtype=pl.String))
    known = by_name.filter(pl.col("name_tc").is_in([YES, NO]))
    disagree = known.filter(pl.col("tc") != pl.col("name_tc"))
    assert disagree.height == 0, disagree.select("kernel", "tc", "name_tc")
    return {
        "profiled_kernels": table.height,
        "with_op": with_op,
        "gemm_ops": gemm.height,
        "gemm_ops_exact": exact,
        "gemm_tensor_flops": gemm["tensor_flops"].sum(),
        "tensor_core_kernels": table.filter(pl.col("tc") == YES).height,
        "tc_verdicts_by_name_confirmed": known.height,
        "tc_verdicts_only_from_counters": by_name.height - known.height,
        "dram_bytes": table["dram_bytes"].sum(),
    }


PM_METRICS = ("sm__cycles_active.avg", "dram__bytes_read.sum")


def check_pm_samples(trace: kinetolens.Trace) -> dict[str, Any]:
    """CUPTI PM sampling: both metrics sampled on one GPU at a steady interval
    (Kineto's 1 ms), and most kernel time falls in a sample."""
    from kinetolens.analysis.hardware.pm_sampling import pm_per_kernel, pm_samples, sample_info

    samples = pm_samples(trace)
    info = sample_info(samples)
    assert set(info.metrics) == set(PM_METRICS), info.metrics
    assert len(info.devices) == 1 and info.devices[0] is not None, info.devices
    assert info.samples >= 2 and info.interval_ns is not None and 1e5 <= info.interval_ns <= 1e7, info
    assert (samples["value"] >= 0).all()
    per_kernel = pm_per_kernel(trace)
    kernel_time = compute_kernels(trace)["dur"].sum()
    covered = per_kernel["covered"].sum() / kernel_time if kernel_time else 0.0
    assert covered >= 0.5, covered
    return {"samples": info.samples, "interval_ns": info.interval_ns, "kernels": per_kernel.height, "covered": covered}


# -- torch.compile -------------------------------------------------------------------


def triton_kernels(trace: kinetolens.Trace) -> pl.DataFrame:
    return compute_kernels(trace).filter(pl.col("name").str.starts_with("triton_"))


def check_triton_kernels(trace: kinetolens.Trace, provenance: str | None = "inductor") -> dict[str, Any]:
    """Inductor's Triton kernels exist, are named by the ops fused into them
    (``triton_poi_fused_add_mul_0``; the ``fused_ops`` column of
    ``kinetolens kernels`` and the rows of ``kinetolens compiled``) and each
    has the op that launched it.

    ``provenance``: where ``kinetolens compiled`` must have learnt each
    kernel's fused ops: ``inductor`` when the model compiled under
    kinetolens (its FX nodes recorded), ``name`` from the kernel name only.
    """
    triton = triton_kernels(trace)
    assert triton.height > 0, "no Triton kernel in the trace"
    assert triton["name"].str.contains("_fused_").mean() >= 0.5, triton["name"].unique().to_list()
    unattributed = triton.filter(pl.col("op_id").is_null())["name"].unique().to_list()
    assert _share(triton, pl.col("op_id").is_not_null()) >= OP_SHARE, unattributed
    table = kernel_table(trace).filter(pl.col("kernel").str.starts_with("triton_") & pl.col("kernel").str.contains("_fused_"))
    assert table["fused_ops"].is_not_null().all(), table.filter(pl.col("fused_ops").is_null())["kernel"].unique().to_list()
    rows = compiled_kernel_table(trace).filter(pl.col("backend") == "triton")
    assert rows.height > 0 and (rows["fused_ops"] != "").all(), rows.select("name", "fused_ops")
    if provenance is not None:
        assert (rows["provenance"] == provenance).all(), rows.group_by("provenance").len().rows()
    return {
        "triton_kernels": triton.height,
        "triton_share_of_kernel_time": _share(compute_kernels(trace), pl.col("name").str.starts_with("triton_")),
        "compiled_kernels": rows.height,
        "provenance": sorted(set(rows["provenance"].to_list())),
        "with_modules": rows.filter(pl.col("modules") != "").height,
        "example": rows.select("name", "fused_ops", "modules").head(3).rows(),
    }


def check_compiled(trace: kinetolens.Trace, provenance: str | None = "inductor", *, backward: bool = True) -> dict[str, Any]:
    """A torch.compile'd model: :func:`check_triton_kernels`, and the whole
    trace's kernels attributed like an eager model's (op, module, backward
    kernels to the forward compiled function)."""
    return {**check_triton_kernels(trace, provenance), **check_attribution(trace, backward=backward)}


# -- recordings ------------------------------------------------------------------------


def run_recorded(expect_path: Path, check: str) -> dict[str, Any]:
    """Run one check of a recording in ``tests/data/gpu/`` (``NAME.expect.json``
    beside ``NAME.pt.trace.json.gz`` and, for graph replays, its capture
    trace)."""
    expect = json.loads(expect_path.read_text())
    folder = expect_path.parent
    capture = expect.get("capture")
    ncu = expect.get("ncu")
    trace = kinetolens.load(
        folder / expect["trace"], capture=(folder / capture) if capture else False, cache=False,
        ncu=(folder / ncu) if ncu else None,
    )
    if check == "attribution":
        return check_attribution(trace, backward=expect.get("backward", True))
    if check == "tensor_cores":
        return check_tensor_cores(trace)
    if check == "gemm_flops":
        return check_gemm_flops(trace, expect["flop_counter"])
    if check == "attention_flops":
        return check_attention_flops(trace, expect["flop_counter"])
    if check == "memory_peak":
        return check_memory_peak(trace, expect["max_memory_allocated"])
    if check == "graph_replay":
        return check_graph_replay(trace)
    if check == "counters":
        return check_counters(trace)
    if check == "pm_samples":
        return check_pm_samples(trace)
    if check == "ncu_counters":
        return check_ncu_counters(trace)
    if check == "compiled":
        return check_compiled(trace, expect.get("provenance", "inductor"), backward=expect.get("backward", True))
    raise ValueError(f"{expect_path}: unknown check {check!r}")
