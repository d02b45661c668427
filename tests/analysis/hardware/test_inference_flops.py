"""FLOPs and bytes of inference engines' ops against TraceLens' perf-model CSVs.


The cases: SGLang's eager prefill trace (Qwen3-8B on MI300X) and vLLM's
piecewise CUDA-graph capture trace (gpt-oss on MI300X), whose ops carry the
arguments TraceLens read for its rows (the graph replay trace names the same
ops).  For every row of a family we model, the op calls with the same name,
input shapes and dtypes are found and the work counted at or below them is
compared.  TraceLens' "MB" are MiB.

Conventions that differ on purpose (each asserted exactly below):

* addmm / GEMM wrappers with a bias: TraceLens adds M*N FLOPs for the bias;
  we count the product's 2*M*N*K (the Tensor Core work a GEMM's TFLOP/s is
  compared with), as ``torch.utils.flop_counter`` does.
* RMSNorm: TraceLens counts 4*N + 2 per row (+N for a fused residual add);
  we count 4*N (+N): the per-row sum's final reduction and rsqrt are not
  per-element work (under 0.5% of the total for any real hidden size).
* RoPE: TraceLens moves only query and key (read and written); we also read
  the position ids and the cos/sin cache rows they gather (T * rot_dim
  elements), which the kernel must load.
"""

from __future__ import annotations

import ast
import csv
import json
import math

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.workload.work import op_work
from kinetolens.registry.dtypes import dtype_bytes
from kinetolens.registry.flops import REGISTRY

from tests.conftest import GOLDEN, trace_path

MIB = 2**20
_VLLM = "tracelens/inference/vllm_prefilldecode_piecewise/"
CASES = {
    "sglang_prefilldecode": ["tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"],
    # the layers captured in the CUDA graph, and what ran eagerly (attention, the logits GEMM)
    "vllm_prefilldecode_piecewise": [
        _VLLM + "capture_traces/graph_capture_rank_0.1773709679453551615.pt.trace.json.gz",
        _VLLM + "graph_execution.json.gz",
    ],
}


def _norm(text: str) -> str:
    value = ast.literal_eval(text)

    def lists(x: object) -> object:
        return [lists(v) for v in x] if isinstance(x, (list, tuple)) else x

    return json.dumps(lists(value))


class Case:
    def __init__(self, name: str) -> None:
        self.parts = [_Part(rel) for rel in CASES[name]]
        self.golden = GOLDEN / "tracelens" / "inference" / name / "perf_csvs"

    def rows(self, csv_name: str) -> list[dict[str, str]]:
        path = self.golden / csv_name
        if not path.exists():
            return []
        with open(path, newline="") as f:
            return list(csv.DictReader(f))

    def work_of(self, r: dict[str, str], family: str, counted_only: bool = False) -> tuple[float, float]:
        """Work of ``family`` at or below the calls matching the row (all calls agree);
        ``counted_only``: leave out calls without work."""
        results = set().union(*(p.work_of(r, family) for p in self.parts))
        if counted_only:
            results.discard((0.0, 0.0))
        assert results, f"no {r['name']} {r['Input Dims_first']} in the traces"
        assert len(results) == 1, f"{r['name']}: same shapes, different work {results}"
        return results.pop()


class _Part:
    def __init__(self, rel: str) -> None:
        trace = kinetolens.load(trace_path(rel))
        self.ops = trace.ops.select("op_id", "parent_id", "name", "input_dims", "input_types").with_columns(
            key=pl.col("input_dims").map_elements(_norm, return_dtype=pl.String),
            tkey=pl.col("input_types").map_elements(_norm, return_dtype=pl.String),
        )
        self.work = {r[0]: (r[1], r[2]) for r in op_work(trace).select("op_id", "flops", "bytes").iter_rows()}
        self.names = dict(self.ops.select("op_id", "name").iter_rows())
        self.parent = dict(self.ops.select("op_id", "parent_id").iter_rows())
        self.children: dict[int, list[int]] = {}
        for op_id, parent in self.ops.select("op_id", "parent_id").iter_rows():
            if parent is not None:
                self.children.setdefault(parent, []).append(op_id)

    def work_of(self, r: dict[str, str], family: str) -> set[tuple[float, float]]:
        match = (
            (pl.col("name") == r["name"])
            & (pl.col("key") == _norm(r["Input Dims_first"]))
            & (pl.col("tkey") == _norm(r["Input type_first"]))
        )
        found = self.ops.filter(match)["op_id"].to_list()
        results = set()
        for op_id in found:
            flops = moved = 0.0
            stack = [op_id]
            while stack:
                i = stack.pop()
                if i in self.work and REGISTRY[self.names[i]].family == family:
                    flops += self.work[i][0]
                    moved += self.work[i][1]
                stack.extend(self.children.get(i, []))
            results.add((flops, moved))
        return results


@pytest.fixture(scope="module", params=list(CASES))
def case(request: pytest.FixtureRequest) -> Case:
    return Case(request.param)


def _golden(r: dict[str, str]) -> tuple[float, float]:
    return float(r["GFLOPS_first"]) * 1e9, float(r["Data Moved (MB)_first"] or "nan") * MIB


def test_gemm(case: Case) -> None:
    # every GEMM row, the engines' wrappers (vllm::rocm_unquantized_gemm, aiter::gemm_a16w16) too
    rows = case.rows("GEMM.csv")
    assert rows
    for r in rows:
        flops, moved = case.work_of(r, "gemm")
        tl_flops, tl_bytes = _golden(r)
        bias = r["param: bias"] == "True"
        m, n, batch = int(r["param: M"]), int(r["param: N"]), int(r["param: B"] or 1)
        assert flops == pytest.approx(tl_flops - (batch * m * n if bias else 0), rel=1e-9), r["name"]
        assert moved == pytest.approx(tl_bytes, rel=1e-9), r["name"]


def test_rmsnorm(case: Case) -> None:
    # aiter / vLLM RMSNorm and fused add + RMSNorm
    rows = case.rows("RMSNorm_fwd.csv")
    assert rows
    for r in rows:
        flops, moved = case.work_of(r, "norm")
        tl_flops, tl_bytes = _golden(r)
        shape = ast.literal_eval(r["param: op_shape"])
        rows_, channels = shape[0], shape[-1]
        assert flops == pytest.approx(tl_flops - 2 * rows_, rel=1e-9), r["name"]  # TraceLens: +2 per row
        assert flops == pytest.approx(tl_flops, rel=1 / channels)
        assert moved == pytest.approx(tl_bytes, rel=1e-9), r["name"]


def test_rope(case: Case) -> None:
    # RoPE on query and key
    for r in case.rows("RoPE_fwd.csv"):
        flops, moved = case.work_of(r, "rope")
        tl_flops, tl_bytes = _golden(r)
        assert flops == pytest.approx(tl_flops, rel=1e-9)
        dims = ast.literal_eval(r["Input Dims_first"])
        tokens, rot = dims[0][0], dims[4][1]
        gathered = tokens * 8 + tokens * rot * 2  # int64 positions, bf16 cos/sin rows
        assert moved == pytest.approx(tl_bytes + gathered, rel=1e-9)


def test_fused_activation(case: Case) -> None:
    # silu_and_mul (gate-up activation)
    rows = [r for r in case.rows("UnaryElementwise.csv") if r["name"].endswith("_and_mul")]
    for r in rows:
        flops, moved = case.work_of(r, "elementwise")
        tl_flops, tl_bytes = _golden(r)
        assert (flops, moved) == (pytest.approx(tl_flops, rel=1e-9), pytest.approx(tl_bytes, rel=1e-9))
    if case.golden.parent.name.startswith("sglang"):
        assert rows


def test_paged_attention(case: Case) -> None:
    # paged / variable-length attention (vLLM unified attention, aiter batch prefill),
    # its sequences from the engine's step annotation; exact match, FLOPs and bytes
    # The capture trace's dummy batch has no step annotation: its attention calls get no number
    # (the split into sequences is unknown); the replay trace's calls carry TraceLens' figures.
    # Bytes: TraceLens moves one KV-cache token (2 KiB) more on the vLLM case (0.001%).
    rows = [r for r in case.rows("InferenceAttention_fwd.csv") if r["param: H_Q"]]
    assert rows
    for r in rows:
        flops, moved = case.work_of(r, "attention", counted_only=True)
        tl_flops, tl_bytes = _golden(r)
        assert (flops, moved) == (pytest.approx(tl_flops, rel=1e-9), pytest.approx(tl_bytes, rel=1e-5)), r["name"]


def test_step_annotation() -> None:
    # both annotation formats vLLM writes
    from kinetolens.registry.flops_paged_attention import step_batch

    new = step_batch("execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)")
    assert new is not None and (new.context_seqs, new.context_sqsk, new.decode_seqs, new.decode_sk) == (9, 7671310, 37, 34489)
    old = step_batch("execute_context_1(888_788544)_generation_0(0)")
    assert old is not None and (old.context_sq, old.context_sk, old.context_sqsq, old.decode_seqs) == (888, 888, 788544, 0)
    assert step_batch("execute_model") is None


def test_scaled_mm_fp8_from_a_real_trace(tmp_path) -> None:
    # FP8 GEMM (torch._scaled_mm on CPU, profiled for real): 2*M*N*K, scales' bytes read
    import torch
    from torch.profiler import profile

    a = torch.randn(32, 64).to(torch.float8_e4m3fn)
    b = torch.randn(16, 64).to(torch.float8_e5m2).t()
    scale_a, scale_b = torch.ones(32, 1), torch.ones(1, 16)  # per-row / per-column fp32 scales
    with profile(record_shapes=True) as prof:
        torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    path = tmp_path / "fp8.json"
    prof.export_chrome_trace(str(path))
    trace = kinetolens.load(path)
    ops = trace.ops.filter(pl.col("name") == "aten::_scaled_mm")
    work = op_work(trace).filter(pl.col("op_id").is_in(ops["op_id"].implode()))
    assert work["flops"].to_list() == [2 * 32 * 16 * 64]
    assert work["bytes"].to_list() == [32 * 64 + 64 * 16 + (32 + 16) * 4 + 32 * 16 * 2]


def test_scaled_mm_fp4_block_scaled() -> None:
    # MX FP4 GEMM: float4_e2m1fn_x2 stores two values per element (K = 2 * stored),
    # e8m0 block scales (one per 32 values) read
    from kinetolens.registry.flops import compute

    m, n, k = 128, 256, 512
    dims = json.dumps([[m, k // 2], [k // 2, n], [m * k // 32], [n * k // 32], [], [], [], []])
    types = json.dumps(["c10::Float4_e2m1fn_x2"] * 2 + ["c10::Float8_e8m0fnu"] * 2 + ["", "", "Scalar", "Scalar"])
    work = compute("aten::_scaled_mm", dims, types, json.dumps(["", "", "", "", "", "", "15", "False"]))
    assert work is not None and work.flops == 2 * m * n * k
    assert work.bytes == (m + n) * k / 2 + (m + n) * k / 32 + m * n * 2


def test_low_precision_ceilings() -> None:
    # FP8/FP4 Tensor Core rates in the GPU registry, and the roofline picks them
    from kinetolens.analysis.hardware.roofline import ceiling, peak_tflops
    from kinetolens.registry.gpus import SPECS, match_device
    from kinetolens.registry.tensor_cores import YES

    mi355 = match_device("AMD Instinct MI355X")
    assert mi355 is not None and mi355.name == "MI355X"
    rates = {name: (SPECS[name].peak_tflops("fp8"), SPECS[name].peak_tflops("fp4")) for name in
             ("H100-SXM", "H200", "B200", "MI300X", "MI355X")}  # fmt: skip
    assert rates == {
        "H100-SXM": (1979.0, None), "H200": (1979.0, None), "B200": (4500.0, 9000.0),
        "MI300X": (2614.9, None), "MI355X": (5033.2, 10066.3),
    }  # fmt: skip
    name, assumed = ceiling("aten::_scaled_mm", "fp4x2", YES)
    assert (name, assumed) == ("fp4 tensor", False)
    assert peak_tflops(SPECS["B200"], name) == 9000.0
    assert ceiling("aten::_scaled_mm", "fp8", None) == ("fp8 tensor", True)


def test_moe_forward_from_the_layer_ops(case: Case) -> None:
    # fused MoE (vllm::moe_forward): k from the TopK op below it, the experts' shapes
    # from the MXFP4 weights it views ([32, 1536, 5888] and [32, 1472, 3072] uint8, two values a byte).
    # TraceLens splits the layer in an up and a down pseudo-op and takes the experts' intermediate size
    # to be the hidden size (3072); the weights say 2944 (2880 padded), so we count (2*2944 + 2944) /
    # (2*3072 + 3072) of its FLOPs.  Its bytes count the activations once per expert visit; ours read the
    # hidden states and the weights once (a different convention: not compared).
    rows = case.rows("MoE_unfused_fwd.csv")
    if not rows:
        return
    tl = sum(_golden(r)[0] for r in rows)
    r = rows[0]
    tokens, hidden, k = int(r["param: num_tokens"]), int(r["param: hidden_dim"]), int(r["param: topk"])
    assert tl == pytest.approx(2 * tokens * k * hidden * 3 * int(r["param: inter_dim"]), rel=1e-9)
    flops, _ = case.work_of({**r, "name": "vllm::moe_forward"}, "moe", counted_only=True)  # the op TraceLens split
    assert flops == 2 * tokens * k * hidden * (5888 + 2944)
    assert flops == pytest.approx(tl * (5888 + 2944) / (3 * 3072), rel=1e-9)


def test_fused_experts_with_weights() -> None:
    # fused-experts ops that take the weights: T=64 tokens, k=2 of E=8 experts,
    # H=256, I=512 (w13 gate+up 1024 wide); 64*2 visits reach all 8 experts
    from kinetolens.registry.flops import compute

    dims = json.dumps([[64, 256], [8, 1024, 256], [8, 256, 512], [64, 2], [64, 2]])
    types = json.dumps(["c10::BFloat16"] * 3 + ["float", "int"])
    work = compute("vllm::outplace_fused_experts", dims, types, None)
    assert work is not None
    assert work.flops == 2 * 64 * 2 * 256 * 1024 + 2 * 64 * 2 * 512 * 256
    assert work.bytes == 2 * 64 * 256 * 2 + 64 * 2 * 4 + (8 * 1024 * 256 + 8 * 256 * 512) * 2
    bad = json.dumps([[64, 256], [8, 1024, 128], [8, 256, 512], [64, 2], [64, 2]])  # w1's inner dim is not H
    assert compute("vllm::outplace_fused_experts", bad, types, None) is None


MI300 = [
    "Falconsai_nsfw_image_detection__1016002",
    "Qwen_Qwen1.5-0.5B-Chat__1016005",
    "facebook_timesformer-base-finetuned-k400__1016002",
    "gaunernst_bert-small-uncased__1016001",
]


def _check_perf_rows(part: _Part, golden) -> int:
    """TraceLens' GEMM, SDPA and convolution rows against our work; the number of rows checked."""
    checked = 0
    for csv_name, family in (("GEMM.csv", "gemm"), ("SDPA_fwd.csv", "attention"), ("CONV_fwd.csv", "conv")):
        path = golden / csv_name
        if not path.exists():
            continue
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                results = part.work_of(r, family)
                assert len(results) == 1, r["name"]
                flops, moved = results.pop()
                tl_flops, tl_bytes = _golden(r)
                if family == "gemm" and r["param: bias"] == "True":
                    tl_flops -= int(r["param: B"] or 1) * int(r["param: M"]) * int(r["param: N"])
                if family == "conv":  # MIOpen's convolution reads the bias itself; TraceLens leaves it out
                    dims, types = ast.literal_eval(r["Input Dims_first"]), ast.literal_eval(r["Input type_first"])
                    tl_bytes += (dims[2][0] * dtype_bytes(types[2])) if dims[2] else 0
                if family == "attention":
                    b, h, lq = (int(float(r[f"param: {p}"])) for p in ("B", "H_Q", "N_Q"))
                    tl_bytes += b * h * lq * 4
                assert flops == pytest.approx(tl_flops, rel=1e-9), (csv_name, r["name"], r["Input Dims_first"])
                assert moved == pytest.approx(tl_bytes, rel=1e-9), (csv_name, r["name"], r["Input Dims_first"])
                checked += 1
    return checked


@pytest.mark.parametrize("model", MI300)
def test_mi300_models_gemm_attention_conv(model: str) -> None:
    # TraceLens' GEMM, SDPA and convolution rows on the MI300X model traces: FLOPs and
    # bytes exact, but for the bias adds (see the module docstring), the convolution bias MIOpen reads and
    # flash attention's log-sum-exp (fp32, one per query row), which the kernels read / write and
    # TraceLens leaves out
    part = _Part(f"tracelens/mi300/{model}.json.gz")
    assert _check_perf_rows(part, GOLDEN / "tracelens" / "mi300" / f"{model}_perf_report_csvs")


def test_xdit_flux_gemm_attention_conv() -> None:
    # the xDiT FLUX.1 inference case (aiter::fmha_v3_fwd attention among them), same
    # conventions as the MI300X model traces
    part = _Part("tracelens/inference/xdit_flux.1/capture_traces/capture_trace_rank_0.json.gz")
    assert _check_perf_rows(part, GOLDEN / "tracelens" / "inference" / "xdit_flux.1" / "perf_csvs") >= 40


def test_elementwise_and_reduce_rows(case: Case) -> None:
    # the elementwise and reduce rows of the inference cases.  Bytes agree; TraceLens
    # counts one FLOP per element of a copy_ (a copy or dtype conversion does no arithmetic: we count none).
    # TraceLens leaves a bool copy's bytes empty.
    checked = 0
    for csv_name, family in (("UnaryElementwise.csv", None), ("Reduce_fwd.csv", "reduction")):
        for r in case.rows(csv_name):
            if r["name"].endswith("_and_mul"):
                continue  # the fused activation: test_fused_activation
            fam = family or REGISTRY[r["name"]].family
            flops, moved = case.work_of(r, fam)
            if (flops, moved) == (0.0, 0.0) and r["Input type_first"] == "['long int', 'int', 'Scalar']":
                continue  # the int64 -> int32 conversion inside aten::cumsum: counted with the cumsum
            tl_flops, tl_bytes = _golden(r)
            if r["name"] == "aten::copy_":
                tl_flops = 0.0
            assert flops == pytest.approx(tl_flops, rel=1e-9), (r["name"], r["Input Dims_first"])
            if r["Data Moved (MB)_first"]:
                assert moved == pytest.approx(tl_bytes, rel=1e-9), (r["name"], r["Input Dims_first"])
            checked += 1
    assert checked


def _matrix_kernel_time(rel: str) -> tuple[float, float, float]:
    """(Tensor Core kernel time, the part with FLOPs, the part launched by an op), in ns."""
    from kinetolens.analysis.hardware.tensor_cores import kernel_tensor_cores
    from kinetolens.analysis.workload.work import kernel_work
    from kinetolens.registry.tensor_cores import YES

    trace = kinetolens.load(trace_path(rel))
    k = (
        kernel_tensor_cores(trace)
        .filter(pl.col("tc") == YES)
        .join(trace.kernels.select("kernel_id", "dur", "op_id"), on="kernel_id")
        .join(kernel_work(trace), on="kernel_id", how="left")
    )
    with_flops = k.filter(pl.col("flops").fill_null(0) > 0)["dur"].sum()
    return float(k["dur"].sum()), float(with_flops), float(k.filter(pl.col("op_id").is_not_null())["dur"].sum())


@pytest.mark.parametrize(
    "rel",
    [
        "tracelens/b200/eager_trace.json.gz",
        "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
        *(f"tracelens/mi300/{m}.json.gz" for m in MI300),
    ],
)
def test_matrix_kernel_time_has_flops(rel: str) -> None:
    # FLOPs for >= 95% of GEMM-like (Tensor Core / matrix core) kernel time.
    # The MI300X Qwen trace's kernels with no launch record (the previous iteration's tail) take the
    # ops of the same launches one iteration later (kinetolens.model.earlier_launches): every kernel has an op.
    total, with_flops, launched = _matrix_kernel_time(rel)
    assert total > 0
    assert with_flops >= 0.95 * total
    assert launched == total


def test_b200_moe_from_its_buffers() -> None:
    # the B200 gpt-oss MoE layer (FlashInfer/TensorRT-LLM MXFP4 kernels) records no
    # weights: k = 4 from its [888, 4] int32 expert ids, I = 512 from its FP8 [5472, 512] activation
    # buffer beside the [5472, 3072] one.  The kernels' grids agree: the SwiGLU GEMM's 8 tiles of 128
    # output features are N13 = 2*I = 1024, the down GEMM's 24 are H = 3072.
    trace = kinetolens.load(trace_path("tracelens/b200/eager_trace.json.gz"))
    moe = trace.ops.filter(pl.col("name") == "vllm::moe_forward")["op_id"]
    work = op_work(trace).filter(pl.col("op_id").is_in(moe.implode()))
    assert work.height == moe.len() == 36
    assert set(work["flops"].to_list()) == {2 * 888 * 4 * 3072 * (1024 + 512)}
    # the weights' dtype is not in the trace: read at no less than FP4's half byte (a floor), 128 experts
    weights = 128 * (3072 * 1024 + 512 * 3072) / 2
    assert set(work["bytes"].to_list()) == {2 * 888 * 3072 * 2 + 888 * 128 * 2 + weights}
    grids = dict(
        trace.kernels.filter((pl.col("op") == "vllm::moe_forward") & pl.col("name").str.starts_with("bmm_"))
        .select(swiglu=pl.col("name").str.contains("swiGlu"), tiles=pl.col("grid_x"))
        .unique()
        .iter_rows()
    )
    assert {k: v * 128 for k, v in grids.items()} == {True: 1024, False: 3072}


def test_flash_attn_ops() -> None:
    # flash-attn's / aiter's own attention ops, fixed-length (B, L, H, D) and
    # variable-length (4 sequences of 256 tokens packed in 1024, causal): each sequence's 256^2/2 pairs
    from kinetolens.registry.flops import compute

    bf16 = '"c10::BFloat16"'
    fixed = compute("flash_attn::_flash_attn_forward", "[[2, 128, 8, 64], [2, 128, 8, 64], [2, 128, 8, 64]]",
                    f"[{bf16}, {bf16}, {bf16}, \"Scalar\", \"Scalar\", \"Scalar\"]",
                    '["", "", "", "0.", "0.125", "True"]')  # fmt: skip
    assert fixed is not None and fixed.flops == 2 * 2 * 8 * 128 * 128 * 128 / 2
    dims = "[[1024, 8, 64], [1024, 2, 64], [1024, 2, 64], [5], [5], [], [], [], [], []]"
    types = f'[{bf16}, {bf16}, {bf16}, "int", "int", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"]'
    varlen = compute("flash_attn::_flash_attn_varlen_forward", dims, types,
                     '["", "", "", "", "", "256", "256", "0.", "0.125", "True"]')  # fmt: skip
    pairs = 4 * (256 * 256 - 256 * 256 / 2)
    assert varlen is not None and varlen.flops == 2 * 8 * (64 + 64) * pairs
    assert varlen.bytes == 2 * 1024 * 8 * 64 * 2 + 1024 * 2 * 128 * 2  # q read, out written, K and V read once
    ragged = compute("flash_attn::_flash_attn_varlen_forward", dims, types,
                     '["", "", "", "", "", "300", "300", "0.", "0.125", "True"]')  # fmt: skip
    assert ragged is None  # 1024 tokens are not 4 x 300: the split is not in the arguments


def test_kv_cache_writes(case: Case) -> None:
    # the KV-cache write beside attention (sglang::store_cache): no FLOPs; the new keys
    # and values read and written.  We also read the slot ids (T int64), which TraceLens leaves out.
    for r in case.rows("InferenceAttention_fwd.csv"):
        if r["name"] != "sglang::store_cache":
            continue
        flops, moved = case.work_of(r, "memory")
        tl_flops, tl_bytes = _golden(r)
        tokens = ast.literal_eval(r["Input Dims_first"])[4][0]
        assert (flops, moved) == (tl_flops, tl_bytes + tokens * 8)


def test_paged_decode_attention() -> None:
    # vLLM's decode kernels (paged_attention_v1/v2) count the step's decode keys:
    # 37 sequences with 34489 keys in all, 64 query / 8 KV heads of 64
    from kinetolens.registry.flops_base import OpArgs
    from kinetolens.registry.flops_paged_attention import paged_attention_decode, step_batch

    bf16 = '"c10::BFloat16"'
    op = OpArgs.parse(
        "_C::paged_attention_v1",
        "[[37, 64, 64], [37, 64, 64], [4096, 8, 8, 16, 8], [4096, 8, 64, 16], [], []]",
        f'[{bf16}, {bf16}, {bf16}, {bf16}, "Scalar", "Scalar"]',
        '["", "", "", "", "8", "0.125"]',
    )
    assert paged_attention_decode(op) is None  # no step annotation: the sequence lengths are unknown
    op.batch = step_batch("execute_37_context_0(sq0sk0sqsq0sqsk0)_generation_37(sq37sk34489sqsq37sqsk34489)")
    work = paged_attention_decode(op)
    assert work is not None and work.flops == 2 * 64 * (64 + 64) * 34489
    assert work.bytes == 2 * 37 * 64 * 64 * 2 + 34489 * 8 * 128 * 2


def test_engine_quantized_gemms() -> None:
    # the engines' FP8 and block-scaled FP4 GEMMs, scale tensors read
    from kinetolens.registry.flops import compute

    m, n, k = 64, 512, 1024
    fp8 = compute(
        "_C::cutlass_scaled_mm",
        json.dumps([[m, n], [m, k], [k, n], [m, 1], [1, n], []]),
        json.dumps(["c10::BFloat16", "c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float", ""]),
        None,
    )
    assert fp8 is not None and fp8.flops == 2 * m * n * k
    assert fp8.bytes == m * k + k * n + (m + n) * 4 + m * n * 2
    fp4 = compute(  # NVFP4: one fp8 scale per 16 values
        "_C::cutlass_scaled_fp4_mm",
        json.dumps([[m, n], [m, k // 2], [n, k // 2], [m, k // 16], [n, k // 16], []]),
        json.dumps(["c10::BFloat16", "unsigned char", "unsigned char", "c10::Float8_e4m3fn", "c10::Float8_e4m3fn",
                    "float"]),  # fmt: skip
        None,
    )
    assert fp4 is not None and fp4.flops == 2 * m * n * k
    assert fp4.bytes == (m + n) * k / 2 + (m + n) * k / 16 + m * n * 2 + 4  # and the fp32 alpha
    a4w4 = compute(  # MXFP4 on MI355X: one e8m0 scale per 32 values
        "aiter::gemm_a4w4",
        json.dumps([[m, k // 2], [n, k // 2], [m, k // 32], [n, k // 32], [m, n], []]),
        json.dumps(["c10::Float4_e2m1fn_x2"] * 2 + ["c10::Float8_e8m0fnu"] * 2 + ["c10::BFloat16", ""]),
        None,
    )
    assert a4w4 is not None and a4w4.flops == 2 * m * n * k
    assert a4w4.bytes == (m + n) * k / 2 + (m + n) * k / 32 + m * n * 2
    mismatched = json.dumps([[m, k], [n, k // 2], [m, 1], [1, n], [m, n], []])
    assert compute("aiter::gemm_a8w8", mismatched, json.dumps(["c10::Float8_e4m3fnuz"] * 2 + ["float"] * 2
                                                               + ["c10::BFloat16", ""]), None) is None  # fmt: skip


def test_engine_op_precision() -> None:
    # the roofline holds an engine op to the ceiling of the dtype it computes in,
    # not of its first argument (an `out` tensor, int64 positions, FP4 stored as bytes)
    from kinetolens.analysis.hardware.roofline import _op_dtype

    bf16, fp8 = "c10::BFloat16", "c10::Float8_e4m3fn"
    assert _op_dtype("_C::cutlass_scaled_mm", [[64, 512], [64, 1024], [1024, 512]], [bf16, fp8, fp8]) == "fp8"
    assert _op_dtype("_C::cutlass_scaled_fp4_mm", [[64, 512], [64, 512], [512, 512]],
                     [bf16, "unsigned char", "unsigned char"]) == "fp4x2"  # fmt: skip
    assert _op_dtype("_C::rotary_embedding", [[8], [8, 512], [8, 64]], ["long int", bf16, bf16]) == "bf16"


def test_xdit_flux_norms() -> None:
    # layer and group norm rows of the xDiT case (aten::layer_norm, aiter::_groupnorm_run).
    # A convention each: we count 5 per element (mean, variance, normalize) +1 for the weight +1 for the
    # bias = 7N; TraceLens 5N + 6 per channel.  Bytes: we read the weight and bias at their dtype and write
    # mean and rstd per row (fp32); TraceLens reads three fp32 values per channel and writes no statistics.
    part = _Part("tracelens/inference/xdit_flux.1/capture_traces/capture_trace_rank_0.json.gz")
    golden = GOLDEN / "tracelens" / "inference" / "xdit_flux.1" / "perf_csvs" / "Normalization_fwd.csv"
    with open(golden, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10
    for r in rows:
        results = part.work_of(r, "norm")
        assert len(results) == 1
        flops, moved = results.pop()
        tl_flops, tl_bytes = _golden(r)
        dims = ast.literal_eval(r["Input Dims_first"])
        n, channels = math.prod(dims[0]), dims[2][0]
        rows_ = dims[0][0] * int(ast.literal_eval(r["Concrete Inputs_first"])[1]) if "groupnorm" in r["name"] else (
            n // channels
        )
        assert tl_flops == 5 * n + 6 * channels and flops == 7 * n, r["name"]
        assert moved == tl_bytes - 3 * channels * 4 + 2 * channels * 2 + 2 * rows_ * 4, r["name"]


def test_fp4_tensor_core_eligibility() -> None:
    # FP4 matrix ops need Blackwell's Tensor Cores (compute capability 10.0)
    from kinetolens.analysis.hardware.tensor_cores import eligibility

    assert eligibility("aten::_scaled_mm", "fp4x2", (9, 0))[0] is False
    assert eligibility("aten::_scaled_mm", "fp4x2", (10, 0))[0] is True
