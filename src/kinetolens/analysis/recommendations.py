"""What to change first: rules that turn the analyses into ranked advice.

Each rule is one small function ``(RuleContext) -> list[Finding]`` listed in
:data:`RULES`; adding a rule is adding a function to that list.  A finding
carries the numbers that triggered it, where they come from (op, module,
source line, step), what to change, and an estimated saving per step in
milliseconds with a sentence saying how it was estimated.

Where a rule's advice maps to a what-if change (:data:`SIMULATED`: no
DataLoader stall, no launch overhead, communication overlapped; and the
Tensor Core rules' kernels made faster, registered in
``RuleContext.changes``), its saving is simulated: every step's dependency graph is re-timed with that change
(:mod:`kinetolens.analysis.whatif`) and the finding carries the predicted
step time.  The other rules estimate with a formula, deliberately
conservative, because advice ranked by inflated savings sends people after
the wrong thing:

* a saving is never more than the wall time the rule can point at in the
  trace (exclusive DataLoader time, GPU idle gaps, exposed communication);
* rules that overlap (a DataLoader stall also shows up as a host-wait GPU
  gap) do not count the same time twice: the host-bound rule subtracts
  what the DataLoader and synchronization rules already claimed;
* a rule whose benefit is not time (memory near capacity) reports 0 ms and
  sorts last.

Per-step figures divide by the number of profiled steps (one window for a
trace without ``ProfilerStep`` ranges); on an inference trace they are per
engine iteration, worded so, without training advice (:mod:`.inference_advice`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import polars as pl

from kinetolens.analysis.gpu_metrics import gpu_metrics
from kinetolens.analysis.idle import comm_comp_overlap, idle_gaps
from kinetolens.analysis.inference_advice import TRAINING_ONLY, iteration_steps, served
from kinetolens.analysis.inference_phases import iterations
from kinetolens.analysis.launch import launch_stats, short_kernels
from kinetolens.analysis.memory import WINDOW_SUM, memory_events, memory_peaks
from kinetolens.analysis.overview import average_breakdown, step_breakdown, step_windows
from kinetolens.analysis.tensor_cores import (
    _capability,
    matrix_roots,
    op_tensor_core_eligibility,
)
from kinetolens.analysis.trace_kind import TraceKind, trace_kind
from kinetolens.model.steps import without_incomplete_steps
from kinetolens.model.trace import Trace
from kinetolens.registry.gpus import gpu_spec, trace_device
from kinetolens.registry.kernel_names import short_kernel_name

NS_PER_MS = 1e6

#: Share of step time in the DataLoader above which loading is worth fixing
#: (torch-tb-profiler's threshold is 5%).
DATALOADER_SHARE = 0.05
#: GPU utilization below which host-bound gaps are reported.
LOW_UTILIZATION = 0.8
#: Host-wait idle (not already explained) as a share of step time to report.
HOST_WAIT_SHARE = 0.05
#: Launch-bound kernels per step worth a CUDA graph / fusion.
TINY_KERNELS_PER_STEP = 50
#: Allocated peak as a share of device memory that counts as near capacity.
MEMORY_NEAR_CAPACITY = 0.9
#: Exposed (non-overlapped) communication as a share of step time to report.
EXPOSED_COMM_SHARE = 0.05
#: Tensor-Core-eligible fp32 kernel time as a share of all kernel time to report.
FP32_TC_SHARE = 0.1
#: Assumed speed-up of matrix kernels moved from fp32 CUDA cores to Tensor
#: Cores; real gains are 2-8x (TF32/fp16 peaks vs fp32), 2x keeps it conservative.
TC_SPEEDUP = 2.0
#: Calls that block the host until the GPU (or a stream) has drained.
SYNC_CALLS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
)
#: Ops whose only purpose is reading a device value on the host.
SCALAR_READ_OPS = ("aten::item", "aten::_local_scalar_dense")


@dataclass(frozen=True)
class Finding:
    """One recommendation: what triggered it, where, what to do, what it saves."""

    rule: str
    title: str
    evidence: str
    change: str
    saving_ms: float
    estimate: str
    where: dict[str, Any] = field(default_factory=dict)
    #: The mean step time (ms) the what-if simulator predicts after ``whatif``; None: a formula estimate.
    predicted_step_ms: float | None = None
    #: The what-if change the saving was simulated with (``kinetolens whatif --change``).
    whatif: str | None = None
    #: What ``saving_ms`` is per: ``step``, or ``iteration`` on an inference trace (:mod:`.inference_advice`).
    per: str = "step"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _repr_html_(self) -> str:
        """Jupyter shows a finding as a titled card, like the HTML report."""
        from html import escape

        return (
            f"<div><b>{escape(self.title)}</b> (saves up to {self.saving_ms:.2f} ms per {self.per}"
            + (f"; predicted step {self.predicted_step_ms:.2f} ms" if self.predicted_step_ms is not None else "")
            + ")"
            f"<p>{escape(self.evidence)}</p><p><b>Change:</b> {escape(self.change)}</p>"
            f"<p><i>Estimate: {escape(self.estimate)}</i></p></div>"
        )


@dataclass
class RuleContext:
    """The trace plus the shared analyses rules read, each computed once."""

    trace: Trace
    #: What-if changes a rule's advice amounts to, by rule, when they depend on
    #: what the rule found (the kernels of the ops it names).
    changes: dict[str, list[Any]] = field(default_factory=dict)

    @cached_property
    def kind(self) -> TraceKind:
        """GPU or not, PyTorch or not: which rules apply and how advice is worded."""
        return trace_kind(self.trace)

    @cached_property
    def iterations(self) -> pl.DataFrame | None:
        """An inference trace's engine iterations, the unit its figures are per
        instead of steps (:mod:`.inference_advice`); None for other traces."""
        its = iterations(self.trace) if self.kind.inference else None
        return its if its is not None and its.height else None

    @cached_property
    def breakdown(self) -> pl.DataFrame:
        if self.iterations is not None:
            return iteration_steps(self.iterations)[0]
        return step_breakdown(self.trace)

    @cached_property
    def average_ns(self) -> dict[str, float]:
        return average_breakdown(self.breakdown) if self.breakdown.height else {}

    @cached_property
    def steps(self) -> int:
        return max(self.breakdown.height, 1)

    @property
    def step_ms(self) -> float:
        return self.average_ns.get("total", 0.0) / NS_PER_MS

    @cached_property
    def windows(self) -> pl.DataFrame:
        if self.iterations is not None:
            return iteration_steps(self.iterations)[1]
        return step_windows(self.trace)

    @cached_property
    def gpu_metrics(self) -> pl.DataFrame:
        return gpu_metrics(self.trace)

    @cached_property
    def tensor_core_ops(self) -> pl.DataFrame:
        """Matrix op calls with their Tensor Core verdicts (two rules read them)."""
        return op_tensor_core_eligibility(self.trace)

    def in_steps(self, frame: pl.DataFrame, ts: str = "ts", keep_end: bool = False) -> pl.DataFrame:
        """Rows of ``frame`` whose ``ts`` falls in a step window, with ``step``
        (and the window's end as ``w_end`` when ``keep_end``)."""
        if frame.height == 0 or self.windows.height == 0:
            empty = frame.head(0).with_columns(step=pl.lit(None, pl.Int64))
            return empty.with_columns(w_end=pl.lit(None, pl.Int64)) if keep_end else empty
        w = self.windows.select("step", w_start="start", w_end="end").sort("w_start")
        joined = (
            frame.drop("step", strict=False)
            .sort(ts)
            .join_asof(w, left_on=ts, right_on="w_start", strategy="backward")
        )
        joined = joined.filter(pl.col(ts) < pl.col("w_end")).drop("w_start")
        return joined if keep_end else joined.drop("w_end")

    @cached_property
    def sync_cost(self) -> pl.DataFrame:
        """Blocking calls in steps with the GPU idle time each one caused.

        A sync returns when the GPU has drained its queue, so the GPU then
        idles until the host launches again: the gap from the call's end to
        the next GPU activity is the cost (the time spent blocked is not,
        since the GPU was busy then), up to the end of the step.
        """
        calls = self.trace.runtime.filter(pl.col("name").is_in(SYNC_CALLS))
        calls = self.in_steps(calls.select("name", "ts", "end", "op_id", "module", "source"), keep_end=True)
        if calls.height == 0:
            return calls.with_columns(idle_ns=pl.lit(0, pl.Int64))
        starts = self.trace.kernels.select(pl.col("ts").alias("next_ts")).sort("next_ts")
        joined = calls.sort("end").join_asof(starts, left_on="end", right_on="next_ts", strategy="forward")
        ops = self.trace.ops.select("op_id", pl.col("name").alias("op"), "parent_id")
        return joined.with_columns(
            # Idle past the step's end is the next step's start-up, not this sync's.
            idle_ns=(pl.min_horizontal("next_ts", "w_end") - pl.col("end")).clip(lower_bound=0).fill_null(0)
        ).join(ops, on="op_id", how="left")


def _top(frame: pl.DataFrame, key: str, weight: str) -> Any:
    """The value of ``key`` carrying most ``weight`` (None when all null)."""
    rows = frame.filter(pl.col(key).is_not_null())
    if rows.height == 0:
        return None
    return rows.group_by(key).agg(pl.col(weight).sum()).sort(weight, descending=True)[key][0]


def dataloader_bound(ctx: RuleContext) -> list[Finding]:
    avg = ctx.average_ns
    total, loading = avg.get("total", 0.0), avg.get("dataloader", 0.0)
    if not total or loading / total < DATALOADER_SHARE:
        return []
    share = loading / total
    gpu = ctx.kind.gpu
    return [
        Finding(
            rule="dataloader_bound",
            title="Input loading stalls the step",
            evidence=(
                f"{share:.1%} of the step ({loading / NS_PER_MS:.2f} of {total / NS_PER_MS:.2f} ms) is spent in "
                f"DataLoader __next__{' with no GPU work running' if gpu else ''}, averaged over {ctx.steps} steps"
            ),
            change=(
                "Load batches in worker processes: DataLoader(num_workers>0, pin_memory=True, "
                "persistent_workers=True), and move heavy preprocessing out of __getitem__ or onto the GPU"
                if gpu
                else "Load batches in worker processes: DataLoader(num_workers>0, persistent_workers=True), "
                "and move heavy preprocessing out of __getitem__ (precompute it once, or cache decoded samples)"
            ),
            saving_ms=loading / NS_PER_MS,
            estimate=(
                "the DataLoader's exclusive time per step ("
                + ("time no kernel, copy or runtime call ran" if gpu else "time no other op ran")
                + "); worker processes can hide at most that"
            ),
            where={"op": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"},
        )
    ]


def synchronizations(ctx: RuleContext) -> list[Finding]:
    cost = ctx.sync_cost
    if cost.height == 0:
        return []
    idle_ms = float(cost["idle_ns"].sum()) / NS_PER_MS / ctx.steps
    if idle_ms <= 0:
        return []
    per_call = cost.group_by("name").agg(pl.len(), pl.col("idle_ns").sum()).sort("idle_ns", descending=True)
    calls = ", ".join(f"{n} x{c}" for n, c, _ in per_call.iter_rows())
    scalar = cost.filter(pl.col("op").is_in(SCALAR_READ_OPS)).height
    source, op = _top(cost, "source", "idle_ns"), _top(cost, "op", "idle_ns")
    steps = sorted({int(s) for s in cost["step"].drop_nulls().to_list()})
    return [
        Finding(
            rule="synchronization",
            title="Host-device synchronizations drain the GPU queue",
            evidence=(
                f"{cost.height} blocking calls in the profiled steps ({calls}); "
                + (f"{scalar} under aten::item/_local_scalar_dense; " if ctx.kind.pytorch else "")
                + f"the GPU then idled {idle_ms:.2f} ms per step "
                f"until the next launch" + (f"; most of it from {source.removeprefix('in ')}" if source else "")
            ),
            change=(
                "Remove the sync from the hot loop: keep values on the GPU (accumulate losses as tensors, "
                "log every N steps), avoid .item()/.cpu()/print of CUDA tensors and torch.cuda.synchronize(), "
                "use non_blocking=True copies"
                if ctx.kind.pytorch
                else "Remove the blocking calls from the loop: cudaMemcpyAsync from pinned (cudaMallocHost) "
                "memory on a stream instead of cudaMemcpy, and wait on an event (cudaEventRecord / "
                "cudaStreamWaitEvent) only where the host needs the result, not cudaDeviceSynchronize "
                "after every kernel"
            ),
            saving_ms=idle_ms,
            estimate="the GPU idle gap from each sync's return to the next GPU activity, per step",
            where={"op": op, "source": source, "module": _top(cost, "module", "idle_ns"), "steps": steps},
        )
    ]


def host_bound(ctx: RuleContext) -> list[Finding]:
    util = ctx.gpu_metrics
    if util.height == 0 or not ctx.step_ms:
        return []
    utilization = float(util["utilization"].drop_nulls().max() or 0.0)
    if utilization >= LOW_UTILIZATION:
        return []
    gaps = ctx.in_steps(idle_gaps(ctx.trace).filter(pl.col("idle_category") == "host_wait"))
    if gaps.height == 0:
        return []
    # Side streams (NCCL, copies) wait for the host while the compute stream
    # runs, so take the stream with the most host-wait, and cap it by the
    # step time no GPU work ran at all (the overview's non-GPU categories).
    per_stream = gaps.group_by("stream").agg(pl.col("gap_ns").sum()).sort("gap_ns", descending=True)
    wait_ms = float(per_stream["gap_ns"][0]) / NS_PER_MS / ctx.steps
    avg = ctx.average_ns
    gpu_idle_ms = sum(avg.get(c, 0.0) for c in ("runtime", "cpu_exec", "other")) / NS_PER_MS
    sync_ms = float(ctx.sync_cost["idle_ns"].sum()) / NS_PER_MS / ctx.steps if ctx.sync_cost.height else 0.0
    # DataLoader time is outside gpu_idle_ms already (its own category).
    rest = max(min(wait_ms, gpu_idle_ms) - sync_ms, 0.0)
    if rest / ctx.step_ms < HOST_WAIT_SHARE:
        return []
    # A served model has no DataLoader: its words name only what it has.
    explained = "syncs" if ctx.kind.inference else "data loading or syncs"
    outside = "" if ctx.kind.inference else " outside the DataLoader"
    return [
        Finding(
            rule="host_bound",
            title="Low GPU utilization: the GPU waits for the host",
            evidence=(
                f"GPU utilization {utilization:.1%}; streams idled {wait_ms:.2f} ms per step waiting for a launch "
                f"that had not started, {rest:.2f} ms of it not explained by {explained} "
                f"({rest / ctx.step_ms:.1%} of the {ctx.step_ms:.2f} ms step)"
            ),
            change=(
                "Cut host overhead per step: torch.compile (fuses ops, fewer launches), CUDA graphs "
                "(torch.cuda.graphs / mode='reduce-overhead'), or a larger batch so each launch does more work"
                if ctx.kind.pytorch
                else "Cut host work between launches: capture the repeated launch sequence in a CUDA graph "
                "(cudaStreamBeginCapture / cudaGraphLaunch), fuse small kernels, give each launch more work, "
                "and keep host-side computation and copies off the GPU's critical path"
            ),
            saving_ms=rest,
            estimate=(
                "host-wait idle per step on the stream that waits most, capped by the step time with no GPU "
                f"work{outside}, minus the GPU idle the synchronization finding claims"
            ),
        )
    ]


def launch_overhead(ctx: RuleContext) -> list[Finding]:
    stats = ctx.trace.kernels.height and launch_stats(ctx.trace)
    if not isinstance(stats, pl.DataFrame) or stats.height == 0:
        return []
    short = short_kernels(stats.filter(pl.col("kind") == "kernel"))
    count = int(short["count"].sum()) if short.height else 0
    if count / ctx.steps < TINY_KERNELS_PER_STEP:
        return []
    cpu_us, gpu_us = float(short["cpu_us"].sum()), float(short["gpu_us"].sum())
    saving = max(cpu_us - gpu_us, 0.0) / 1000.0 / ctx.steps
    top = short.row(0, named=True)
    return [
        Finding(
            rule="launch_overhead",
            title="Many tiny kernels: launch-bound",
            evidence=(
                f"{count / ctx.steps:.0f} kernels per step run shorter than their launch call "
                f"({gpu_us / count:.1f} us on the GPU vs {cpu_us / count:.1f} us to launch on average); "
                f"most launch time: {short_kernel_name(top['name'])} x{top['count']}"
            ),
            change=(
                "Fuse elementwise chains (torch.compile), use fused/foreach optimizers "
                "(foreach=True or fused=True), capture the step in a CUDA graph"
                if ctx.kind.pytorch
                else "Fuse small kernels into fewer larger ones (one kernel per loop body, not per array "
                "operation), or capture the launch sequence in a CUDA graph (cudaGraphLaunch)"
            ),
            saving_ms=saving,
            estimate="launch time minus kernel time of the launch-bound kernels, per step",
            where={"kernel": top["name"]},
        )
    ]


def fp32_tensor_cores(ctx: RuleContext) -> list[Finding]:
    ops = ctx.tensor_core_ops
    kernel_ns = float(ctx.trace.kernels.filter(pl.col("kind") == "kernel")["dur"].sum() or 0)
    if ops.height == 0 or not kernel_ns:
        return []
    fp32 = ops.filter((pl.col("dtype") == "fp32") & (pl.col("tc") != "yes"))
    time_us = float(fp32["kernel_time_us"].sum()) + _backward_kernel_us(ctx.trace, fp32["op_id"])
    share = time_us * 1000.0 / kernel_ns
    if share < FP32_TC_SHARE:
        return []
    cc = _capability(trace_device(ctx.trace))
    tf32 = cc is not None and cc >= (8, 0)
    top = _top(fp32, "op", "kernel_time_us")
    _simulate_kernels(ctx, "fp32_tensor_cores", fp32["op_id"], backward=True, what="fp32 matmul/conv kernels")
    return [
        Finding(
            rule="fp32_tensor_cores",
            title="Matrix math runs in fp32 without Tensor Cores",
            evidence=(
                f"{share:.1%} of kernel time ({time_us / 1000.0 / ctx.steps:.2f} ms per step) is fp32 matmul/conv "
                f"(forward and backward) on non-Tensor-Core kernels, {fp32.height} op calls; most in {top}"
            ),
            change=(
                "Use automatic mixed precision (torch.autocast(device_type='cuda', dtype=torch.bfloat16 or "
                "float16) with GradScaler for fp16)"
                + ("; or at least torch.backends.cuda.matmul.allow_tf32 = True / set_float32_matmul_precision('high')"
                   if tf32 else "")
            ),
            saving_ms=time_us / 1000.0 / ctx.steps * (1.0 - 1.0 / TC_SPEEDUP),
            estimate=f"those kernels' time per step, assuming only a {TC_SPEEDUP:g}x Tensor Core speed-up",
            where={"op": top},
        )
    ]


def _simulate_kernels(ctx: RuleContext, rule: str, roots: pl.Series, backward: bool, what: str) -> None:
    """Register the what-if of ``rule``: the kernels of the matrix ops ``roots``
    (and of their backward) :data:`TC_SPEEDUP` times faster."""
    from kinetolens.analysis.whatif import Change

    ops = ctx.trace.ops.select("op_id").with_columns(matrix_roots(ctx.trace.ops.select("op_id", "name", "parent_id")))
    k = ctx.trace.kernels.filter(pl.col("kind") == "kernel").select("kernel_id", "op_id", "fwd_op_id")
    mine = roots.implode()
    fwd = k.join(ops, on="op_id", how="inner").filter(pl.col("root").is_in(mine))["kernel_id"]
    ids = fwd.to_list()
    if backward:
        bwd = k.filter(pl.col("fwd_op_id").is_not_null()).join(ops, left_on="fwd_op_id", right_on="op_id", how="inner")
        ids += bwd.filter(pl.col("root").is_in(mine))["kernel_id"].to_list()
    factor = 1.0 / TC_SPEEDUP
    ctx.changes[rule] = [Change("kernel_ids", what, factor, f"{what}={factor:g}", ids=tuple(sorted(set(ids))))]


def _backward_kernel_us(trace: Trace, forward_ops: pl.Series) -> float:
    """Kernel time of the backward of ``forward_ops`` (matrix-op roots):
    the gradient convolutions/matmuls run at the forward's precision too."""
    if forward_ops.len() == 0:
        return 0.0
    roots = trace.ops.select("op_id").with_columns(
        matrix_roots(trace.ops.select("op_id", "name", "parent_id"))
    )
    k = trace.kernels.filter((pl.col("kind") == "kernel") & pl.col("fwd_op_id").is_not_null())
    k = k.select("fwd_op_id", "dur").join(roots, left_on="fwd_op_id", right_on="op_id", how="inner")
    return float(k.filter(pl.col("root").is_in(forward_ops.implode()))["dur"].sum() or 0) / 1000.0


def misaligned_shapes(ctx: RuleContext) -> list[Finding]:
    ops = ctx.tensor_core_ops
    if ops.height == 0:
        return []
    bad = ops.filter(
        (pl.col("shapes_ok") == False) & pl.col("dtype").is_in(["fp16", "bf16"]) & (pl.col("tc") != "yes")
    )
    if bad.height == 0:
        return []
    time_us = float(bad["kernel_time_us"].sum())
    top = bad.sort("kernel_time_us", descending=True).row(0, named=True)
    _simulate_kernels(ctx, "misaligned_shapes", bad["op_id"], backward=False, what="misaligned half-precision matmul/conv kernels")
    return [
        Finding(
            rule="misaligned_shapes",
            title="Half-precision matrix shapes not divisible by 8",
            evidence=(
                f"{bad.height} fp16/bf16 matmul/conv calls with {top['misaligned']} "
                f"(e.g. {top['op']} {top['dims']}) ran without Tensor Cores: {time_us / 1000.0 / ctx.steps:.2f} ms "
                "per step"
            ),
            change="Pad hidden sizes, vocabulary and channel counts (and the batch) to multiples of 8 (16 for int8/fp8)",
            saving_ms=time_us / 1000.0 / ctx.steps * (1.0 - 1.0 / TC_SPEEDUP),
            estimate=f"those kernels' time per step, assuming a {TC_SPEEDUP:g}x speed-up once on Tensor Cores",
            where={"op": top["op"], "dims": top["dims"]},
        )
    ]


def memory_capacity(ctx: RuleContext) -> list[Finding]:
    if ctx.trace.memory.height == 0:
        return []
    peaks = memory_peaks(memory_events(ctx.trace)).filter(pl.col("device").str.starts_with("GPU"))
    capacity = {f"GPU{d.get('id')}": d.get("totalGlobalMem") for d in ctx.trace.devices if d.get("totalGlobalMem")}
    spec = gpu_spec(ctx.trace)
    fallback = int(spec.memory_gb * (1 << 30)) if spec is not None and spec.memory_gb else None
    out = []
    for row in peaks.iter_rows(named=True):
        total = capacity.get(row["device"]) or fallback
        if not total or row["peak_allocated"] < MEMORY_NEAR_CAPACITY * total:
            continue
        share = row["peak_allocated"] / total
        out.append(
            Finding(
                rule="memory_near_capacity",
                title=f"{row['device']} memory near capacity",
                evidence=(
                    f"peak allocated {'at least ' if row['basis'] == WINDOW_SUM else ''}"
                    f"{row['peak_allocated'] / (1 << 30):.2f} GiB = {share:.1%} of "
                    f"{total / (1 << 30):.2f} GiB, at {row['peak_op']}"
                    + (f" in {row['peak_module']}" if row["peak_module"] else "")
                ),
                change=(
                    "Leave headroom before scaling up: activation checkpointing, mixed precision, smaller micro-batch "
                    "with gradient accumulation, or free large tensors earlier"
                    if ctx.kind.pytorch
                    else "Leave headroom before scaling up: free or reuse large buffers earlier, or process the "
                    "data in smaller chunks"
                ),
                saving_ms=0.0,
                estimate="no time saving; the risk is out-of-memory errors and allocator cache flushes",
                where={"op": row["peak_op"], "module": row["peak_module"], "device": row["device"]},
            )
        )
    return out


def exposed_communication(ctx: RuleContext) -> list[Finding]:
    overlap = comm_comp_overlap(ctx.trace)
    if overlap.height == 0 or not ctx.step_ms:
        return []
    row = overlap.row(0, named=True)
    comm_ms = (row["comm_us"] or 0.0) / 1000.0 / ctx.steps
    exposed = comm_ms - (row["overlap_us"] or 0.0) / 1000.0 / ctx.steps
    if exposed / ctx.step_ms < EXPOSED_COMM_SHARE:
        return []
    compute_ms = ctx.average_ns.get("kernel", 0.0) / NS_PER_MS
    saving = min(exposed, compute_ms)
    return [
        Finding(
            rule="exposed_communication",
            title="Communication not overlapped with compute",
            evidence=(
                f"{comm_ms:.2f} ms of collectives per step, {exposed:.2f} ms of it with no compute kernel running "
                f"({exposed / ctx.step_ms:.1%} of the {ctx.step_ms:.2f} ms step)"
            ),
            change=(
                "Overlap collectives with compute: DDP gradient bucketing (bucket_cap_mb, no "
                "find_unused_parameters), FSDP prefetch (backward_prefetch, forward_prefetch), async ops "
                "(async_op=True) waited on as late as possible"
                if ctx.kind.pytorch
                else "Overlap communication with compute: non-blocking calls (MPI_Isend/MPI_Irecv, "
                "MPI_Iallreduce, or NCCL on its own stream) started as soon as the data is ready and waited "
                "on as late as possible"
            ),
            saving_ms=saving,
            estimate="exposed communication per step, capped by the compute time there is to hide it behind",
        )
    ]


#: Measured DRAM bytes over an op's modeled minimum above which its kernels
#: re-read (or spill) far more than the work needs.  Below 2x, L2 misses on
#: operands read twice and 32-byte sector granularity explain the gap.
DRAM_EXCESS_RATIO = 2.0
#: Excess DRAM traffic per step below which a finding is noise (tiny ops).
DRAM_EXCESS_MIN_BYTES = 1 << 20
#: At most this many op types are reported by the DRAM-traffic rule.
DRAM_EXCESS_TOP = 3


def excess_dram_traffic(ctx: RuleContext) -> list[Finding]:
    """Op types whose kernels moved far more DRAM bytes (CUPTI counters) than
    their shapes need.  The saving is the excess bytes' time at the GPU's
    peak DRAM bandwidth (the least that traffic can cost), capped at the
    ops' kernel time when the trace has kernel timings."""
    if ctx.trace.kernel_counters.height == 0:
        return []
    from kinetolens.analysis.counters import measured_vs_modeled, op_measured
    from kinetolens.analysis.work import carried_work

    table = measured_vs_modeled(ctx.trace).filter(
        (pl.col("bytes_ratio") >= DRAM_EXCESS_RATIO) & (pl.col("excess_bytes") / ctx.steps >= DRAM_EXCESS_MIN_BYTES)
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
        kernel_ms = float(kernels.filter(pl.col("carrier").is_in(ids.implode()))["dur"].sum()) / NS_PER_MS / ctx.steps
        excess = row["excess_bytes"] / ctx.steps
        saving = excess / bw / NS_PER_MS if bw else 0.0
        if kernel_ms > 0:
            saving = min(saving, kernel_ms)
        module = ctx.trace.ops.filter(pl.col("op_id").is_in(ids.implode()))["module"].drop_nulls().mode()
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


#: Share of the step an op type must lose against a realistic roofline to be reported.
BELOW_ROOF_SHARE = 0.05
#: At most this many op types are reported by the roofline rule.
BELOW_ROOF_TOP = 3


def below_roofline(ctx: RuleContext) -> list[Finding]:
    """Op types that run far below what the GPU allows for their work.

    The saving is the time they lose against a realistic 75% of their
    roofline (min of the precision's peak and intensity x DRAM bandwidth),
    per step: reaching 100% of a roof is not a plan anyone can execute.
    Quiet when the GPU is not in the spec table, since there is no roof.
    """
    from kinetolens.analysis.roofline import REALISTIC, roofline_by

    spec = gpu_spec(ctx.trace)
    if spec is None or not ctx.step_ms or ctx.trace.kernels.height == 0:
        return []
    from kinetolens.model.earlier_launches import without_earlier_iteration  # per step: the steps' own work

    table = roofline_by(without_earlier_iteration(ctx.trace), spec, "op").with_columns(
        lost_ms=pl.col("lost_75_us") / 1000.0 / ctx.steps
    )
    table = table.filter(pl.col("lost_ms") >= BELOW_ROOF_SHARE * ctx.step_ms).sort("lost_ms", descending=True)
    out = []
    for row in table.head(BELOW_ROOF_TOP).iter_rows(named=True):
        memory_bound = row["bound"] == "memory"
        if ctx.kind.pytorch:
            change = (
                "It is memory-bound: fuse it with its neighbours (torch.compile), avoid layout copies "
                "(.contiguous(), dtype casts, channels_last mismatches), keep activations in bf16/fp16"
                if memory_bound
                else "It is compute-bound: run it in bf16/fp16 or TF32 on Tensor Cores, pad M/N/K to multiples "
                "of 8 (64 for best tiles), larger batches, or let torch.compile(mode='max-autotune') pick the kernels"
            )
        else:
            change = (
                "It is memory-bound: fuse it with the kernels before and after it, avoid extra copies and "
                "layout transposes, use narrower data types"
                if memory_bound
                else "It is compute-bound: use Tensor Core math (TF32/FP16/BF16 cuBLAS or cuDNN calls), pad "
                "M/N/K to multiples of 8, give each launch more work"
            )
        out.append(
            Finding(
                rule="below_roofline",
                title=f"{row['op']} runs at {row['pct_of_roof']:.0f}% of its roofline",
                evidence=(
                    f"{row['calls']} calls, {row['device_us'] / 1000.0 / ctx.steps:.2f} ms of GPU time per step, "
                    f"{row['bound']}-bound at {row['intensity']:.1f} FLOP/byte; at {REALISTIC:.0%} of the "
                    f"{spec.name} roof it would take {row['lost_ms']:.2f} ms less per step "
                    f"({row['lost_ms'] / ctx.step_ms:.1%} of the {ctx.step_ms:.2f} ms step)"
                ),
                change=change,
                saving_ms=row["lost_ms"],
                estimate=f"time lost per step against {REALISTIC:.0%} of the op's roofline (kinetolens roofline)",
                where={"op": row["op"], "bound": row["bound"], "pct_of_roof": row["pct_of_roof"]},
            )
        )
    return out


#: A module path component of ``nn.DataParallel`` (not DistributedDataParallel).
DATA_PARALLEL_MODULE = r"(?:^|\.)(DataParallel_\d+)(?:\.|$)"


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
    parents = ops.select(pl.col("op_id").alias("parent_id"), pl.col("module").alias("parent_module"))
    outermost = own.join(parents, on="parent_id", how="left").filter(
        pl.col("parent_module").is_null() | (pl.col("parent_module") != name)
    )
    children = (
        ops.filter(pl.col("parent_id").is_in(outermost["op_id"].implode()))
        .group_by("parent_id")
        .agg(child_ns=pl.col("dur").sum())
    )
    self_time = outermost.join(children, left_on="op_id", right_on="parent_id", how="left").select(
        "ts", dur=(pl.col("dur") - pl.col("child_ns").fill_null(0)).clip(lower_bound=0)
    )
    in_steps = ctx.in_steps(self_time)
    saving = float(in_steps["dur"].sum()) / NS_PER_MS / ctx.steps if in_steps.height else 0.0
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


#: The rules, in the order findings with equal savings are listed.
RULES: list[Callable[[RuleContext], list[Finding]]] = [
    dataloader_bound,
    host_bound,
    launch_overhead,
    synchronizations,
    fp32_tensor_cores,
    misaligned_shapes,
    below_roofline,
    memory_capacity,
    exposed_communication,
    excess_dram_traffic,
    data_parallel,
]


#: What a rule needs of the program (:class:`TraceKind` fields): a rule
#: whose needs the trace lacks is not run.  Rules about GPU time need a GPU;
#: rules that read PyTorch's ops (DataLoader, aten matmuls and their dtypes,
#: nn.DataParallel) need PyTorch.  Rules not listed apply to every trace.
REQUIRES: dict[str, tuple[str, ...]] = {
    "dataloader_bound": ("pytorch",),
    "host_bound": ("gpu",),
    "launch_overhead": ("gpu",),
    "synchronizations": ("gpu",),
    "fp32_tensor_cores": ("gpu", "pytorch"),
    "misaligned_shapes": ("gpu", "pytorch"),
    "below_roofline": ("gpu",),
    "memory_capacity": ("gpu",),
    "exposed_communication": ("gpu",),
    "excess_dram_traffic": ("gpu",),
    "data_parallel": ("pytorch",),
}


def applies(rule: Callable[[RuleContext], list[Finding]], kind: TraceKind) -> bool:
    """Whether ``rule`` is meant for a program of this kind (:data:`REQUIRES`; no training advice to a server)."""
    if kind.inference and rule.__name__ in TRAINING_ONLY:
        return False
    return all(getattr(kind, need) for need in REQUIRES.get(rule.__name__, ()))


def recommendations(trace: Trace) -> list[Finding]:
    """Every rule's findings over the steps that ran whole, the largest
    estimated saving per step first."""
    return findings(RuleContext(without_incomplete_steps(trace)))


#: Malformed events skipped, as a share of all events, above which no advice is given.
SKIPPED_EVENTS_SHARE = 0.001


def damaged_inputs(trace: Trace) -> str | None:
    """Why the trace's numbers cannot be trusted for advice, or None.

    A file cut short loses every event written after the cut; Kineto writes
    host ops before runtime calls, kernels and memory events, so a cut can
    take all GPU work while the host ops still look whole.  Events skipped
    as malformed may be any of them (half the kernels of a trace, say).
    Every rule reads the step breakdown or the kernels, so none is run on
    such a trace.
    """
    cut = [w for w in trace.warnings if w.kind == "truncated JSON" or "ends early" in w.detail]
    if cut:
        lost = []
        if trace.devices and trace.kernels.height == 0:
            lost.append(f"every GPU kernel (the file lists {len(trace.devices)} GPUs)")
        if trace.runtime.height == 0 and trace.devices:
            lost.append("every runtime call")
        what = f", including {' and '.join(lost)}" if lost else ""
        return f"the file is truncated ({cut[0].detail}): events written after the cut are missing{what}"
    skipped = sum(w.count for w in trace.warnings if w.kind == "malformed events skipped")
    if skipped:
        kept = sum(t.height for t in (trace.ops, trace.runtime, trace.kernels, trace.python, trace.memory))
        share = skipped / (skipped + kept)
        if share >= SKIPPED_EVENTS_SHARE:
            return f"{skipped:,} events ({share:.1%}) were malformed and skipped; which kernels or ops they were is unknown"
    return None


def findings(ctx: RuleContext) -> list[Finding]:
    """:func:`recommendations` over a context a caller already holds (the
    summary shows the step breakdown and GPU utilization too, computed once).
    None on a trace whose inputs are damaged (:func:`damaged_inputs`)."""
    if damaged_inputs(ctx.trace) is not None:
        return []
    found = [f for rule in RULES if applies(rule, ctx.kind) for f in rule(ctx)]
    if ctx.iterations is None:  # the simulator re-times steps, not an engine's iterations
        found = simulated(found, ctx.trace, ctx.changes)
    if ctx.kind.inference:
        found = served(found, per_iteration=ctx.iterations is not None)
    return sorted(found, key=lambda f: -f.saving_ms)  # stable: ties keep RULES order


#: The what-if change each rule's advice amounts to, and the change its
#: saving is counted from: worker processes hide the DataLoader; CUDA graphs
#: (and torch.compile's reduce-overhead) remove launch overhead; overlapping
#: collectives hides communication; the host-bound rule counts what host work
#: beyond data loading costs (all of it removed, data loading already gone),
#: so that it and the DataLoader rule never claim the same time.
SIMULATED: dict[str, tuple[str, ...]] = {
    "dataloader_bound": ("category:data_loading=0",),
    "launch_overhead": ("launch:0",),
    "host_bound": ("category:data_loading=0", "category:cpu=0"),
    "exposed_communication": ("overlap:communication",),
}
#: The change a rule's saving is counted from (default: the trace as measured).
SIMULATED_FROM: dict[str, tuple[str, ...]] = {"host_bound": ("category:data_loading=0",)}


def simulated(found: list[Finding], trace: Trace, made: dict[str, list[Any]] | None = None) -> list[Finding]:
    """``found`` with the savings of :data:`SIMULATED` rules (and of rules that
    put their change in ``made``) taken from the what-if simulator, each
    step's graph built once for all of them.  A trace the simulator cannot
    re-time keeps the formula estimates."""
    from dataclasses import replace

    from kinetolens.analysis.whatif import parse_change, whatif_many
    from kinetolens.errors import TraceError

    made = made or {}
    plan = {r: SIMULATED[r] for r in {f.rule for f in found} if r in SIMULATED}
    plan.update({r: tuple(c.spec for c in made[r]) for r in {f.rule for f in found} if r in made})
    if not plan:
        return found
    changes = {c.spec: c for cs in made.values() for c in cs}
    sets = list(dict.fromkeys([*plan.values(), *(SIMULATED_FROM[r] for r in plan if r in SIMULATED_FROM), ()]))
    try:
        results = dict(zip(sets, whatif_many(trace, [[changes.get(s) or parse_change(s) for s in specs] for specs in sets], paths=False), strict=True))
    except TraceError:
        return found
    measured = results[()].measured_us
    if not results[()].steps or not measured:
        return found
    out = []
    for f in found:
        if f.rule not in plan:
            out.append(f)
            continue
        after = results[plan[f.rule]].predicted_us
        before = results[SIMULATED_FROM.get(f.rule, ())].predicted_us
        saving = max(before - after, 0.0) / 1000
        predicted = measured / 1000 - saving
        spec = " ".join(c for c in plan[f.rule] if c not in SIMULATED_FROM.get(f.rule, ()))
        basis = f" after {' '.join(SIMULATED_FROM[f.rule])}" if f.rule in SIMULATED_FROM else ""
        how = (
            f"{', '.join(c.target or c.spec for c in made[f.rule])} {1 / (made[f.rule][0].factor or 1):g}x faster"
            if f.rule in made
            else f"{spec}{basis} (kinetolens whatif)"
        )
        estimate = (
            f"simulated: each step's dependency graph re-timed with {how}; "
            f"predicted step time after the change: {predicted:,.3g} ms, {-saving / (measured / 1000):+.0%}"
        )
        out.append(replace(f, saving_ms=saving, estimate=estimate, predicted_step_ms=predicted, whatif=None if f.rule in made else spec))
    return out


def recommendations_frame(trace: Trace) -> pl.DataFrame:
    """:func:`recommendations` as a table (``where`` as JSON text)."""
    import json

    rows = [{**f.to_dict(), "where": json.dumps(f.where, default=str)} for f in recommendations(trace)]
    schema = {k: pl.String for k in ("rule", "title", "evidence", "change", "estimate", "where", "whatif", "per")}
    return pl.DataFrame(rows, schema={**schema, "saving_ms": pl.Float64, "predicted_step_ms": pl.Float64}).select(
        "rule", "title", "saving_ms", "per", "predicted_step_ms", "evidence", "change", "estimate", "whatif", "where"
    )
