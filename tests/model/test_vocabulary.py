"""The names every layer reads a trace by are defined once and read the same everywhere.

* Communication kernels: the step breakdown (``summary``) and the
  computation/communication split (``dist``) classify the same kernels, on
  the eight DLRM ranks, on an Nsight export, and on a small trace whose
  collective kernels have no NCCL name (launched by ``nccl:all_reduce`` and
  by ``c10d::allreduce_``), where the two once disagreed.
* Matrix ops: derived from the FLOP registry, so vendor GEMMs count.
* Blocking calls: the sync rule and the dependency graph read one definition.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.advice import recommendations as recs
from kinetolens.analysis.gputime.overview import CATEGORIES, category_intervals, step_breakdown
from kinetolens.analysis.hardware import roofline
from kinetolens.analysis.hardware.tensor_cores import op_tensor_core_eligibility
from kinetolens.analysis.paths import dependency_graph
from kinetolens.analysis.ranks.collectives import comm_overlap_per_step, compute_and_comm_intervals
from kinetolens.model import vocabulary
from kinetolens.registry.flops import REGISTRY
from kinetolens.registry.tensor_cores import CUDA_CORE_MATRIX_OPS
from tests.conftest import TRACES, trace_path

DLRM = sorted((TRACES / "param" / "dlrm_kineto").glob("*.json.gz"))
NSYS = "nsys/nsys-ai_h100_2gpu_1s.sqlite"
COMM = CATEGORIES.index("communication")

# -- communication ------------------------------------------------------------------


def _comm_kernels(trace: kinetolens.Trace) -> tuple[set[tuple], set[tuple]]:
    """(name, op) of the kernels the step breakdown and ``dist`` count as communication.

    One kernel of each distinct (name, op), moved to its own disjoint 10 us
    slot with the host tables emptied, so each slot's category is that
    kernel's alone in both analyses (which merge overlapping intervals).
    """
    k = trace.kernels.filter(pl.col("kind").cast(pl.String) == "kernel")
    if "op" not in k.columns:
        k = k.with_columns(op=pl.lit(None, pl.String))
    reps = k.unique(["name", "op"], keep="first").sort("name", "op", nulls_last=True)
    slot = pl.int_range(pl.len(), dtype=pl.Int64) * 1_000_000 + 1_000_000
    reps = reps.with_columns(ts=slot, dur=pl.lit(10_000, reps.schema["dur"]))
    alone = dataclasses.replace(trace, kernels=reps, ops=trace.ops.clear(), runtime=trace.runtime.clear())
    keys = dict(zip(reps["ts"].to_list(), zip(reps["name"].to_list(), reps["op"].to_list())))
    summary = category_intervals(alone).filter(pl.col("cat") == COMM)["start"].to_list()
    _, comm = compute_and_comm_intervals(alone)
    return {keys[t] for t in summary}, {keys[t] for t in comm["ts"].to_list()}


@pytest.mark.parametrize("path", DLRM, ids=lambda p: p.name.split("_")[0])
def test_summary_and_dist_agree_on_dlrm_comm_kernels(path: Path) -> None:
    summary, dist = _comm_kernels(kinetolens.load(path))
    assert summary == dist
    assert any(name.startswith("ncclKernel_AllReduce") for name, _ in summary)
    assert any(name.startswith("ncclKernel_SendRecv") for name, _ in summary)


def test_summary_and_dist_agree_on_nsys_comm_kernels() -> None:
    trace = kinetolens.load(trace_path(NSYS))
    summary, dist = _comm_kernels(trace)
    assert summary == dist
    assert trace.kernels.height > 1000  # a real classification, not an empty one


def _kineto(path: Path) -> Path:
    """One step: an all-reduce kernel without an NCCL name launched by
    ``nccl:all_reduce``, another launched by ``c10d::allreduce_``, a GEMM
    launched by ``aten::mm``; GPU work after the host ranges, disjoint."""
    host = {"ph": "X", "pid": 1, "tid": 1}
    gpu = {"ph": "X", "pid": 0, "tid": 7, "cat": "kernel"}
    events = [{**host, "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "args": {}}]
    launches = [
        ("nccl:all_reduce", 10, "custom_allreduce_kernel", 200, 300),
        ("aten::mm", 40, "gemm_kernel", 500, 100),
        ("c10d::allreduce_", 70, "two_shot_allreduce_kernel", 600, 200),
    ]
    for i, (op, ts, kernel, k_ts, k_dur) in enumerate(launches, start=1):
        events += [
            {**host, "cat": "cpu_op", "name": op, "ts": ts, "dur": 20, "args": {"External id": i}},
            {**host, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts + 5, "dur": 5,
             "args": {"External id": i, "correlation": i}},
            {**gpu, "name": kernel, "ts": k_ts, "dur": k_dur,
             "args": {"External id": i, "correlation": i, "device": 0, "stream": 7}},
        ]  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}}))
    return path


def test_collective_kernels_without_nccl_names_are_communication_in_summary_and_dist(tmp_path: Path) -> None:
    trace = kinetolens.load(_kineto(tmp_path / "rank0.json"), cache=False)
    launched_by = dict(zip(trace.kernels["name"].to_list(), trace.kernels["op"].to_list()))
    assert launched_by == {
        "custom_allreduce_kernel": "nccl:all_reduce", "gemm_kernel": "aten::mm", "two_shot_allreduce_kernel": "c10d::allreduce_",
    }  # fmt: skip
    step = step_breakdown(trace).row(0, named=True)
    dist = comm_overlap_per_step(trace).row(0, named=True)
    # Only the GEMM is computation, in both; both collectives' kernels are communication.
    assert step["kernel"] == dist["compute_ns"] == 100_000
    assert dist["comm_ns"] == 500_000
    # The breakdown adds the collectives' host ranges (20 us each) to their kernels.
    assert step["communication"] == 540_000
    assert _comm_kernels(trace)[0] == _comm_kernels(trace)[1] == {
        ("custom_allreduce_kernel", "nccl:all_reduce"), ("two_shot_allreduce_kernel", "c10d::allreduce_"),
    }  # fmt: skip


# -- matrix ops ---------------------------------------------------------------------


def test_matrix_ops_are_the_registry_gemm_conv_attention_ops() -> None:
    derived = {n for n, e in REGISTRY.items() if e.family in {"gemm", "conv", "attention"}} - CUDA_CORE_MATRIX_OPS
    assert vocabulary.matrix_ops() == derived
    assert {"aiter::gemm_a16w16", "aiter::gemm_a8w8", "_C::cutlass_scaled_mm", "aten::_int_mm", "aten::addbmm"} <= derived
    assert not {"aten::mv", "aten::addmv", "aten::add", "aten::softmax"} & derived
    # The roofline's Tensor Core ops are the same set.
    assert {n for n in REGISTRY if roofline.tensor_core_op(n)} == derived


def test_vendor_gemms_get_tensor_core_eligibility() -> None:
    """sglang on MI300: its 144 ``aiter::gemm_a16w16`` calls are matrix ops."""
    trace = kinetolens.load(trace_path("tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"))
    rows = op_tensor_core_eligibility(trace).filter(pl.col("op") == "aiter::gemm_a16w16")
    assert rows.height == 144
    assert rows["dtype"].unique().to_list() == ["bf16"]


# -- blocking calls -----------------------------------------------------------------


def test_sync_rule_and_dependency_graph_read_one_definition() -> None:
    from kinetolens.analysis.advice import rule_context  # what the synchronization rule reads

    assert rule_context.SYNCHRONIZING_CALLS is vocabulary.SYNCHRONIZING_CALLS
    assert dependency_graph.BLOCKING_CALLS is vocabulary.BLOCKING_CALLS
    assert vocabulary.SYNCHRONIZING_CALLS < vocabulary.BLOCKING_CALLS
    # ROCm PyTorch's synchronous copy (.item(), .cpu()) is in both.
    assert {"hipMemcpyWithStream", "cudaMemcpy2D", "cudaStreamSynchronize"} <= vocabulary.SYNCHRONIZING_CALLS
    # Calls that block only sometimes are the graph's alone (it checks the work ended first).
    assert {"cudaMemcpyAsync", "cudaEventQuery"} <= vocabulary.BLOCKING_CALLS - vocabulary.SYNCHRONIZING_CALLS


def test_sync_rule_sees_rocm_synchronous_copies() -> None:
    """MI300 ResNet-18: five ``.item()`` calls, each a ``hipMemcpyWithStream``."""
    trace = kinetolens.load(trace_path("tracelens/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz"))
    found = {f.rule: f for f in recs.recommendations(trace)}
    assert "synchronization" in found
    assert "hipMemcpyWithStream x5" in found["synchronization"].evidence


# -- names --------------------------------------------------------------------------


def test_step_prefix_and_gpu_activity_are_defined_once() -> None:
    from kinetolens.ingest import categories, nsys_host
    from kinetolens.model import steps
    from kinetolens.registry import trace_names

    assert nsys_host.STEP_PREFIX is steps.STEP_PREFIX is vocabulary.STEP_PREFIX is trace_names.STEP_PREFIX
    assert vocabulary.GPU_ACTIVITY is categories.GPU_ACTIVITY
    assert dependency_graph.GPU_ACTIVITY is vocabulary.GPU_ACTIVITY


def test_every_category_and_bound_has_words() -> None:
    from kinetolens.analysis.paths.critical_path import BOUND_BY

    assert set(vocabulary.CATEGORY_HEADERS) == {*CATEGORIES, vocabulary.OTHER}
    assert set(vocabulary.CATEGORY_WORDS) == {*CATEGORIES, vocabulary.OTHER, "total"}
    assert set(vocabulary.BOUND_WORDS) == set(BOUND_BY)
