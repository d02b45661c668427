"""Tensor Core verdicts per kernel (names, counters) and eligibility per matrix op."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.hardware.kernels import kernel_table
from kinetolens.analysis.hardware.tensor_cores import (
    kernel_tensor_cores,
    op_tensor_core_eligibility,
)
from kinetolens.cli.main import main
from kinetolens.errors import TraceError
from kinetolens.registry.tensor_cores import (
    NO,
    RULES,
    UNKNOWN,
    YES,
    classify,
    verdict_from_counters,
)

from tests.conftest import GOLDEN, TRACES, trace_path

TABLE = Path(__file__).parents[2] / "data" / "tensor_core_kernels.csv"


def _table() -> list[dict[str, str]]:
    with TABLE.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _trace_files() -> list[Path]:
    skip = {"LICENSE", "LICENSE.pipit", "MANIFEST.md"}
    return sorted(p for p in TRACES.rglob("*") if p.is_file() and p.name not in skip)


def _kernel_names(trace: kinetolens.Trace) -> set[str]:
    names = set(trace.kernels.filter(pl.col("kind") == "kernel")["name"].drop_nulls().to_list())
    ranges = trace.device_events.filter(pl.col("kind") == "profiler_range")
    return names | set(ranges["name"].drop_nulls().to_list())


# -- the reviewed table of real kernel names ------------------------------------------


def test_rules_reproduce_every_reviewed_kernel_name() -> None:
    rows = _table()
    wrong = [(r["kernel"][:100], r["tc"], classify(r["kernel"])[0]) for r in rows if classify(r["kernel"])[0] != r["tc"]]
    assert not wrong, wrong
    # Each verdict class is well represented: a rule set that said "unknown"
    # to everything would fail the first assertion, not pass it.
    counts = {v: sum(r["tc"] == v for r in rows) for v in (YES, NO, UNKNOWN)}
    assert counts[YES] >= 100 and counts[NO] >= 400, counts


def test_table_covers_every_kernel_name_in_the_traces() -> None:
    listed = {r["kernel"] for r in _table()}
    missing: dict[str, str] = {}
    for path in _trace_files():
        try:
            trace = kinetolens.load(path)
        except TraceError:
            continue  # execution traces, memory snapshots: no kernels
        for name in _kernel_names(trace) - listed:
            missing.setdefault(name[:120], str(path.relative_to(TRACES)))
    assert not missing, missing


def test_table_rows_name_a_real_trace_and_give_evidence() -> None:
    for row in _table():
        assert (TRACES / row["trace"]).is_file(), row["trace"]
        assert row["evidence"].strip(), row["kernel"][:80]


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        # Families that are not in our traces but are common today.
        ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64_cgasize1x2x1_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", YES),
        ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__51_cublas", NO),
        ("volta_h884gemm_128x128_ldg8_nn", YES),
        ("turing_fp16_s1688cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1", YES),
        ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", YES),
        ("ampere_i16832gemm_int8_128x128_ldg16_stages_64x3_nt", YES),
        ("void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>(Flash_fwd_params)", YES),
        ("fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t>::Params)", YES),
        ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float>::Params)", UNKNOWN),
        ("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNN", YES),
        ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<4>>>>", YES),
        ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_GRVW8", YES),
        ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<>>()", YES),
        ("triton_tem_fused_mm_0", UNKNOWN),
        ("triton_red_fused_sum_0", NO),
        ("volta_sgemm_128x64_nn", NO),
        ("Memcpy DtoH (Device -> Pinned)", NO),
        ("void tinygemm_m16n8k16_chunk_kernel<(KReductionType)0, 8, 8>(void const*)", YES),
        ("my_custom_kernel", UNKNOWN),
        # SGLang's fused per-head QK RMSNorm and RoPE+KV-store (B300 decode trace).
        ("void (anonymous namespace)::fused_qknorm_warp<128l, true, __nv_bfloat16>((anonymous namespace)::QKNormParams)", NO),
        ("void (anonymous namespace)::fused_rope_store_kernel<true, 128l, true, __nv_bfloat16, long, 16u>((anonymous namespace)::FusedRopeStoreParams)", NO),
    ],
)
def test_current_kernel_families(name: str, verdict: str) -> None:
    assert classify(name)[0] == verdict


def test_rules_are_data_with_a_reason_each() -> None:
    assert all(r.verdict in (YES, NO, UNKNOWN) and r.reason for r in RULES)
    # First match wins: the SIMT exception sits before the CUTLASS tensor-op rule.
    order = [r.reason for r in RULES]
    assert order.index("CUTLASS SIMT kernel: CUDA-core FMA") < order.index("CUTLASS tensor-op kernel")


def test_counters_decide_when_measured() -> None:
    assert verdict_from_counters({"sm__inst_executed_pipe_tensor.sum": 4096.0, "dram__bytes_read.sum": 1.0}) == YES
    assert verdict_from_counters({"sm__inst_executed_pipe_tensor.sum": 0.0}) == NO
    assert verdict_from_counters({"dram__bytes_read.sum": 10.0}) is None
    # Tensor Core math decides before tensor-pipe instructions: the H200's elementwise
    # add issued 1,024 HFMA2.MMA instructions to the tensor pipe and no matrix math
    hfma2 = {"sm__inst_executed_pipe_tensor.sum": 1024.0, "sm__ops_path_tensor_src_bf16_dst_fp32.sum": 0.0}
    assert verdict_from_counters(hfma2) == NO
    assert verdict_from_counters({**hfma2, "sm__ops_path_tensor_src_fp16.sum": 2.0e6}) == YES


# -- where torch-tb-profiler's allowlist was wrong --------------------------------------

#: Kernels the plugin called "No" that issue MMA instructions.  Both are in our
#: A100 traces; the names say TF32 MMA (``tf32 ... tensor16x8x8``; mangled
#: ``MmaTensorOp`` with ``tfloat32_t``).  The plugin's list predates the
#: ``sm80_xmma_*`` / CUTLASS 2.x naming.  The CUPTI counters of the same
#: family in hta/cupti_profiler agree (no FFMA work in the xmma fprop kernel).
PLUGIN_MISSED = (
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn",
    "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolution",
)


def _plugin_rows() -> list[tuple[str, str, str]]:
    rows = []
    for path in sorted((GOLDEN / "tb_plugin").glob("*.json")):
        data = json.loads(path.read_text())
        rows += [(r[0], r[1], path.name) for r in data.get("top_kernels") or []]
    return rows


def test_old_allowlist_misses_sm80_kernels_we_classify() -> None:
    rows = _plugin_rows()
    missed = [(n, src) for n, used, src in rows if used == "No" and n.startswith(PLUGIN_MISSED)]
    assert {n[:40] for n, _ in missed} == {p[:40] for p in PLUGIN_MISSED}
    for name, _ in missed:
        assert classify(name)[0] == YES, name


#: Kernel families newer than the plugin's allowlist (NVIDIA names up to sm80, no
#: AMD at all): it says "No" to all of them; their names say MMA work.
NEWER_THAN_ALLOWLIST = {
    "nvjet_sm": "cuBLASLt's Hopper/Blackwell GEMMs (B300: nvjet_sm103_*)",
    "bmm_Bfloat16_": "TensorRT-LLM's sm100 bf16 batched GEMMs (tcgen05)",
    "fmhaSm100": "TensorRT-LLM's sm100 fused attention",
    "igemm_": "MIOpen implicit-GEMM convolutions on xdlops (gtcx: MFMA, bf16)",
    "_ZN2ck16tensor_operation": "composable-kernel XDL convolutions (MFMA)",
}


def test_plugin_says_no_to_newer_kernel_families() -> None:
    rows = [(n, used) for n, used, _ in _plugin_rows() if n.startswith(tuple(NEWER_THAN_ALLOWLIST))]
    assert {p for p in NEWER_THAN_ALLOWLIST if any(n.startswith(p) for n, _ in rows)} == set(NEWER_THAN_ALLOWLIST)
    assert {used for _, used in rows} == {"No"}
    assert all(classify(n)[0] == YES for n, _ in rows)


def test_we_agree_with_the_plugin_everywhere_else() -> None:
    for name, used, src in _plugin_rows():
        if name.startswith(PLUGIN_MISSED + tuple(NEWER_THAN_ALLOWLIST)):
            continue
        ours = classify(name)[0]
        if used == "Yes":
            assert ours == YES, (name, src)
        else:
            assert ours in (NO, UNKNOWN), (name, src)


def test_alexnet_tensor_core_time_the_plugin_reported_as_zero() -> None:
    """The plugin's 0% on alexnet is its missed TF32 convs: 6 kernels, 1814 us."""
    golden = json.loads((GOLDEN / "tb_plugin" / "hta__critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz.json").read_text())
    assert golden["tc_used_ratio_all_kernels"] == 0.0
    trace = kinetolens.load(trace_path("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"))
    tc = kernel_tensor_cores(trace).join(trace.kernels.select("kernel_id", "dur"), on="kernel_id")
    yes = tc.filter(pl.col("tc") == YES)
    assert yes.height == 6 and yes["dur"].sum() == 1_814_000  # the plugin's own top_kernels row: 6 calls, 1814 us
    assert set(yes["name"]) == {PLUGIN_MISSED[0]}


# -- per-kernel table and the kernels command ------------------------------------------


def test_memory_activity_is_never_tensor_core() -> None:
    trace = kinetolens.load(trace_path("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"))
    tc = kernel_tensor_cores(trace)
    assert tc.height == trace.kernels.height
    memory = tc.filter(pl.col("kind").is_in(["memcpy", "memset"]))
    assert memory.height > 0 and set(memory["tc"]) == {NO}
    assert set(tc.filter(pl.col("name").str.contains("wmma_tensorop"))["tc"]) == {YES}


def test_kernels_command_fills_tc(capsys: pytest.CaptureFixture[str]) -> None:
    path = trace_path("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz")
    main(["kernels", str(path), "-c", "idx,kernel,tc", "--csv"])
    out = pl.read_csv(capsys.readouterr().out.encode())
    assert out["tc"].null_count() == 0
    table = kernel_table(kinetolens.load(path))
    assert out["tc"].to_list() == table["tc"].to_list()
    assert out.filter(pl.col("kernel").str.starts_with("Memcpy"))["tc"].unique().to_list() == [NO]


# -- per matrix op ------------------------------------------------------------------


def _eligibility(rel: str) -> pl.DataFrame:
    return op_tensor_core_eligibility(kinetolens.load(trace_path(rel)))


def test_bf16_ops_on_h100_aligned_and_on_tensor_cores() -> None:
    e = _eligibility("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    linear = e.filter(pl.col("op") == "aten::linear")
    assert linear.height == 168 + 73  # 24 layers x 7; + the previous iteration's tail
    assert set(linear["dtype"]) == {"bf16"} and linear["eligible"].all()
    # input [16, 559, 1024] x weight [N, 1024]: M = 16 * 559 = 8944, a multiple of 8.
    assert "M=8944" in linear["dims"][0] and linear["shapes_ok"].all()
    assert set(linear["tc"]) == {YES} and not linear["flagged"].any()
    # The linear is one row: its aten::addmm / aten::mm child is not repeated.
    assert e.filter(pl.col("op").is_in(["aten::addmm", "aten::mm"])).height == 0


def test_misaligned_and_flagged_ops_on_h100() -> None:
    e = _eligibility("tracelens/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz")
    # The patch-embedding conv reads RGB: C=3 is not a multiple of 8.
    conv = e.filter(pl.col("op") == "aten::conv2d")
    assert conv.height == 1 and conv["misaligned"][0] == "C=3" and conv["shapes_ok"][0] is False
    # A bf16 linear with M=1 runs on a cuBLAS gemv kernel: eligible, flagged.
    flagged = e.filter(pl.col("flagged"))
    assert flagged.height == 1
    row = flagged.row(0, named=True)
    assert row["op"] == "aten::linear" and row["misaligned"] == "M=1" and row["tc"] == NO


def test_fp32_on_v100_is_not_eligible() -> None:
    e = _eligibility("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    assert e.height > 0 and set(e["dtype"]) == {"fp32"}
    assert not e["eligible"].any() and not e["flagged"].any()
    assert "8.0" in e["eligible_reason"][0]


def test_fp32_on_a100_ran_tf32_except_k1_products() -> None:
    """control.json: fp32 mm/linear/bmm on A100 ran on TF32 CUTLASS kernels
    (PyTorch < 1.12 enabled TF32 for matmuls), so they are not flagged; the
    ones flagged ran on CUDA-core kernels (K=1 outer products, gemv)."""
    e = _eligibility("hta/trace_diff/control/control.json.gz")
    assert e["eligible"].all()
    on_tc = e.filter(pl.col("tc") == YES)
    assert on_tc.height > 1000 and not on_tc["flagged"].any()
    flagged = e.filter(pl.col("flagged"))
    assert flagged.height > 0 and (flagged["tc"] == NO).all()
    assert flagged["flag_reason"].str.contains("TF32 off").all()


def test_trace_without_shapes_gives_unknown_eligibility() -> None:
    e = _eligibility("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    assert e.height > 0 and e["eligible"].null_count() == e.height and not e["flagged"].any()


@pytest.mark.parametrize(
    ("rel", "golden"),
    [
        ("hta/nccl_parser_config/nccl_data.json.gz", "hta__nccl_parser_config__nccl_data.json.gz.json"),
        ("hta/trace_diff/control/control.json.gz", "hta__trace_diff__control__control.json.gz.json"),
        ("hta/trace_filter/sampled_rank-0.json.gz", "hta__trace_filter__sampled_rank-0.json.gz.json"),
        (
            "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
            "hta__critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz.json",
        ),
    ],
)
def test_tensor_core_time_share_against_the_plugin(rel: str, golden: str) -> None:
    """Our share of kernel time on Tensor Cores equals the plugin's
    ``tc_used_ratio_all_kernels`` once the sm80 xmma / mangled CUTLASS
    kernels it missed are counted as it counted them; with them it is higher
    exactly where the trace has such kernels (nccl_data: 0.2376 vs 0.1638,
    alexnet: 0.1697 vs 0)."""
    plugin = json.loads((GOLDEN / "tb_plugin" / golden).read_text())["tc_used_ratio_all_kernels"]
    trace = kinetolens.load(trace_path(rel))
    k = (
        kernel_tensor_cores(trace)
        .filter(pl.col("kind") == "kernel")
        .join(trace.kernels.select("kernel_id", "dur"), on="kernel_id")
    )
    total = k["dur"].sum()
    yes = k.filter(pl.col("tc") == YES)
    missed = yes.filter(pl.col("name").str.contains("^sm80_xmma|^_ZN19cutlass"))
    assert (yes["dur"].sum() - missed["dur"].sum()) / total == pytest.approx(plugin, abs=1e-9)
    assert (missed.height > 0) == (yes["dur"].sum() / total > plugin + 0.05)
