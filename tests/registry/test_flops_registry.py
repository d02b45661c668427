"""Formula unit tests: hand-computed FLOPs and bytes from Kineto-style arguments."""

from __future__ import annotations

import json

import pytest

from kinetolens.registry.dtypes import canonical, dtype_bytes, promote
from kinetolens.registry.flops import REGISTRY, Work, compute


def work(name: str, dims: list, types: list, concrete: list | None = None) -> Work | None:
    concrete = concrete if concrete is not None else [""] * len(dims)
    return compute(name, json.dumps(dims), json.dumps(types), json.dumps(concrete))


BF, F32 = "c10::BFloat16", "float"


@pytest.mark.parametrize(
    ("spelling", "size"),
    [("double", 8), ("float", 4), ("tf32", 4), ("c10::Half", 2), ("c10::BFloat16", 2), ("c10::Float8_e4m3fn", 1),
     ("c10::Float8_e5m2", 1), ("long int", 8), ("int", 4), ("signed char", 1), ("unsigned char", 1), ("bool", 1),
     ("torch.bfloat16", 2), ("int8", 1)],
)
def test_dtype_sizes(spelling: str, size: int) -> None:
    assert dtype_bytes(spelling) == size


def test_non_tensor_types_have_no_size() -> None:
    for name in ("Scalar", "ScalarList", "TensorList", "GenericList", "Int", "", None):
        assert dtype_bytes(name) is None and canonical(name) is None
    assert promote("bf16", "fp16") == "fp32" and promote("int64", "fp16") == "fp16"


def test_mm_addmm_bmm_baddbmm() -> None:
    w = work("aten::mm", [[64, 32], [32, 16]], [F32, F32])
    assert w.flops == 2 * 64 * 16 * 32 and w.bytes == 4 * (64 * 32 + 32 * 16 + 64 * 16)
    w = work("aten::addmm", [[16], [64, 32], [32, 16], [], []], [BF, BF, BF, "Scalar", "Scalar"],
             ["", "", "", "1", "1"])
    assert w.flops == 2 * 64 * 16 * 32  # the bias add is not counted
    assert w.bytes == 2 * (16 + 64 * 32 + 32 * 16 + 64 * 16)  # but the bias is read
    w = work("aten::bmm", [[3, 5, 6], [3, 6, 4]], [F32, F32])
    assert w.flops == 2 * 3 * 5 * 4 * 6 and w.bytes == 4 * (90 + 72 + 60)
    w = work("aten::baddbmm", [[3, 5, 4], [3, 5, 6], [3, 6, 4], [], []], [F32] * 3 + ["Scalar"] * 2)
    assert w.flops == 720 and w.bytes == 4 * (60 + 90 + 72 + 60)


def test_matmul_linear_einsum_composites() -> None:
    assert work("aten::matmul", [[2, 1, 5, 6], [3, 6, 4]], [F32, F32]).flops == 2 * 6 * 5 * 4 * 6  # batch 2x3
    assert work("aten::matmul", [[6], [6]], [F32, F32]).flops == 12  # dot
    lin = work("aten::linear", [[2, 7, 8], [12, 8], [12]], [F32, F32, F32])
    assert lin.flops == 2 * 14 * 12 * 8 and lin.bytes == 4 * (112 + 96 + 12 + 14 * 12)
    ein = work("aten::einsum", [[], [[3, 5, 6], [3, 6, 4]], []], ["", "TensorList", ""], ["bij,bjk->bik", "", ""])
    assert ein.flops == 2 * 3 * 5 * 6 * 4
    assert REGISTRY["aten::linear"].composite and not REGISTRY["aten::addmm"].composite


def test_conv_forward_shapes_and_flops() -> None:
    # conv2d 4x3x224x224, 768x3x16x16 stride 16 -> 4x768x14x14 (TraceLens' Falcon conv)
    dims = [[4, 3, 224, 224], [768, 3, 16, 16], [], [], [], [], [], [], []]
    types = [BF, BF, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
    w = work("aten::convolution", dims, types, ["", "", "", "[16, 16]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"])
    assert w.flops == 2 * 4 * 14 * 14 * 768 * 3 * 16 * 16 == 924_844_032
    assert w.bytes == 2 * (4 * 3 * 224 * 224 + 768 * 3 * 256 + 4 * 768 * 196)
    # cuDNN's own signature: (self, weight, padding, stride, dilation, groups)
    w2 = work("aten::cudnn_convolution", [[4, 3, 224, 224], [768, 3, 16, 16], [], [], [], []],
              [BF, BF, "ScalarList", "ScalarList", "ScalarList", "Scalar"], ["", "", "[0, 0]", "[16, 16]", "[1, 1]", "1"])
    assert (w2.flops, w2.bytes) == (w.flops, w.bytes)


def test_conv_grouped_transposed_3d() -> None:
    t = [F32, F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
    # grouped: 2x8x10x10, weight 8x4x3x3 (groups 2), stride 2 -> out 4x4
    g = work("aten::convolution", [[2, 8, 10, 10], [8, 4, 3, 3], [8], [], [], [], [], [], []], t,
             ["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "2"])
    assert g.flops == 2 * 2 * 16 * 8 * 4 * 9
    # transposed 1d: in 2x4x9, weight 4x3x3 groups 2 -> C_out 6, L = (9-1)*2 + 3 = 19
    tr = work("aten::convolution", [[2, 4, 9], [4, 3, 3], [6], [], [], [], [], [], []], t,
              ["", "", "", "[2]", "[0]", "[1]", "True", "[0]", "2"])
    assert tr.flops == 2 * 2 * 9 * 36 and tr.bytes == 4 * (72 + 36 + 6 + 2 * 6 * 19)
    # 3d with padding 1: same spatial size
    c3 = work("aten::convolution", [[1, 2, 5, 6, 7], [4, 2, 3, 3, 3], [], [], [], [], [], [], []], t,
              ["", "", "", "[1, 1, 1]", "[1, 1, 1]", "[1, 1, 1]", "False", "[0, 0, 0]", "1"])
    assert c3.flops == 2 * 210 * 4 * 2 * 27


def test_conv_backward_dgrad_wgrad() -> None:
    dims = [[2, 8, 4, 4], [2, 8, 10, 10], [8, 4, 3, 3], [], [], [], [], [], [], [], []]
    types = [F32, F32, F32] + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]
    base = ["", "", "", "[8]", "[2, 2]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "2"]
    one = 2 * 2 * 16 * 8 * 4 * 9
    both = work("aten::convolution_backward", dims, types, [*base, "[True, True, True]"])
    wgrad = work("aten::convolution_backward", dims, types, [*base, "[False, True, False]"])
    dgrad = work("aten::convolution_backward", dims, types, [*base, "[True, False, False]"])
    assert (both.flops, wgrad.flops, dgrad.flops) == (2 * one, one, one)
    # dgrad reads grad_out and weight, writes grad_input
    assert dgrad.bytes == 4 * (2 * 8 * 16 + 288 + 2 * 8 * 100)


def test_attention_causal_halves_and_backward() -> None:
    q = [2, 4, 16, 8]
    t = [BF, BF, BF, "Scalar", "Scalar", "Scalar", "Scalar"]
    dense = work("aten::_scaled_dot_product_flash_attention", [q, q, q, [], [], [], []], t,
                 ["", "", "", "0.", "False", "False", ""])
    causal = work("aten::_scaled_dot_product_flash_attention", [q, q, q, [], [], [], []], t,
                  ["", "", "", "0.", "True", "False", ""])
    assert dense.flops == 4 * 2 * 4 * 16 * 16 * 8 and causal.flops == dense.flops / 2
    assert dense.bytes == 2 * 4 * (2 * 4 * 16 * 8) + 4 * (2 * 4 * 16)  # q, k, v, out + fp32 lse
    # (B, L, H, D) layout of the flash kernel op, causal at index 8
    blhd = [2, 16, 4, 8]
    fl = work("aten::_flash_attention_forward", [blhd] * 3 + [[]] * 6, [BF] * 3 + ["Scalar"] * 6,
              ["", "", "", "", "", "16", "16", "0.", "True"])
    assert fl.flops == causal.flops
    bwd = work("aten::_scaled_dot_product_flash_attention_for_cpu_backward", [q] * 6 + [[]] * 4,
               [F32] * 6 + ["Scalar"] * 4, [""] * 6 + ["0.", "False", "", ""])
    assert bwd.flops == 2.5 * dense.flops


def test_norms_softmax_losses() -> None:
    x = [4, 10, 16]
    ln = work("aten::native_layer_norm", [x, [], [16], [16], []], [BF, "ScalarList", BF, BF, "Scalar"],
              ["", "[16]", "", "", "1e-05"])
    n = 640
    assert ln.flops == 7 * n and ln.bytes == 2 * (2 * n + 32) + 4 * 2 * 40  # mean/rstd fp32 per row
    bn = work("aten::native_batch_norm", [[8, 3, 5, 5], [3], [3], [3], [3], [], [], []],
              [F32] * 5 + ["Scalar"] * 3, ["", "", "", "", "", "False", "0.1", "1e-05"])
    assert bn.flops == 4 * 600  # eval: sub, mul, weight, bias
    gn = work("aten::native_group_norm", [[2, 6, 4, 4], [6], [6], [], [], [], [], []],
              [F32, F32, F32] + ["Scalar"] * 5, ["", "", "", "2", "6", "16", "3", "1e-05"])
    assert gn.flops == 7 * 192 and gn.bytes == 4 * (2 * 192 + 12 + 2 * 6)
    rms = work("aten::_fused_rms_norm", [x, [], [16], []], [F32, "ScalarList", F32, "Scalar"], ["", "[16]", "", ""])
    assert rms.flops == 4 * n and rms.bytes == 4 * (2 * n + 16 + 40)
    sm = work("aten::_softmax", [[6, 8], [], []], [BF, "Scalar", "Scalar"], ["", "-1", "True"])
    assert sm.flops == 5 * 48 and sm.bytes == 2 * 48 + 4 * 48  # half_to_float writes fp32
    nll = work("aten::nll_loss_forward", [[21, 8], [21], [], [], []], [F32, "long int", "", "Scalar", "Scalar"],
               ["", "", "", "1", "-100"])
    assert nll.flops == 21 and nll.bytes == 4 * 168 + 8 * 21 + 4


def test_elementwise_reduction_memory() -> None:
    add = work("aten::add", [[16, 559, 1], [], []], [F32, "double", "Scalar"], ["", "", "1"])
    assert add.flops == 8944 and add.bytes == 4 * 8944 + 8 + 4 * 8944  # 0-dim double read, fp32 out
    mul = work("aten::mul_", [[4, 5], [5]], [BF, F32])
    assert mul.flops == 20 and mul.bytes == 2 * 20 + 4 * 5 + 2 * 20  # in place: self's dtype
    eq = work("aten::eq", [[16, 559], []], ["long int", "Scalar"], ["", "1"])
    assert eq.bytes == 8 * 8944 + 8944  # bool out
    acm = work("aten::addcmul_", [[10], [10], [10], []], [F32] * 3 + ["Scalar"], ["", "", "", "0.5"])
    assert acm.flops == 30
    mean = work("aten::mean", [[16, 559, 1024], [], [], []], [F32, "ScalarList", "Scalar", ""],
                ["", "[-1]", "True", ""])
    assert mean.flops == 16 * 559 * 1024 and mean.bytes == 4 * (16 * 559 * 1024 + 16 * 559)
    full = work("aten::sum", [[2, 4, 16, 8], []], [F32, ""])
    assert full.bytes == 4 * (1024 + 1)
    mx = work("aten::max", [[6, 7], [], []], [BF, "Scalar", "Scalar"], ["", "1", "False"])
    assert mx.bytes == 2 * 42 + 2 * 6 + 8 * 6  # values and int64 indices
    cp = work("aten::copy_", [[10, 10], [10, 10], []], [F32, BF, "Scalar"])
    assert cp.flops == 0 and cp.bytes == 2 * 100 + 4 * 100
    emb = work("aten::embedding", [[50, 16], [3, 7], [], [], []], [F32, "long int", "Scalar", "Scalar", "Scalar"])
    assert emb.bytes == 8 * 21 + 2 * 4 * 21 * 16  # indices + gathered rows read and written
    drop = work("aten::dropout", [[10, 10], [], []], [F32, "Scalar", "Scalar"], ["", "0.1", "False"])
    assert drop is None  # eval mode: no work
    adam = work("aten::_fused_adamw_", [[[10, 10], [5]], [[10, 10], [5]]] + [[]] * 4 + [[]] * 9,
                ["TensorList"] * 6 + ["Scalar"] * 9, [""] * 6 + ["0.001", "0.9", "0.999", "0.01", "1e-08"] + [""] * 4)
    assert adam.flops == 14 * 105 and adam.bytes is None  # tensor lists record no dtype


def test_unknown_or_malformed_arguments_give_no_number() -> None:
    assert work("aten::mm", [[64, 32]], [F32]) is None
    assert work("aten::not_an_op", [[1]], [F32]) is None
    assert compute("aten::mm", "not json", "[]", None) is None
    assert work("aten::convolution", [[1, 3, 8, 8], [4, 3, 3, 3], []], [F32, F32, ""]) is None  # no stride/padding


# -- forward convolutions in traces without stride/padding -----------------------

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RESNET_LEGACY = "kineto_legacy/resnet50_num_workers_0_2020-12/worker0.pt.trace.json.gz"


def _conv_work(rel: str):  # type: ignore[no-untyped-def]
    import polars as pl

    import kinetolens
    from kinetolens.analysis.workload.work import carried_work
    from tests.conftest import trace_path

    trace = kinetolens.load(trace_path(rel))
    convs = trace.ops.filter(pl.col("name") == "aten::cudnn_convolution")
    carried = carried_work(trace).ops.join(trace.ops.select("op_id", "name", "input_dims", "step"), on="op_id")
    return convs, carried


def test_conv_output_from_backward_gradient_unit() -> None:
    from kinetolens.registry.flops import evaluate
    from kinetolens.registry.flops_base import OpArgs

    # A stride-2 3x3 layer as old traces record it: shapes, no stride/padding values.
    dims = json.dumps([[32, 128, 56, 56], [128, 128, 3, 3], [], [], [], [], [], [], []])
    types = json.dumps(["float", "float", "GenericList", "GenericList", "GenericList", "Int", "Bool", "Bool", "Bool"])
    node = OpArgs.parse("CudnnConvolutionBackward", "[[32, 128, 28, 28]]", '["float"]', None)
    w = evaluate(OpArgs.parse("aten::cudnn_convolution", dims, types, None, bwd=node))
    assert w is not None and w.flops == 2 * 32 * 128 * 128 * 3 * 3 * 28 * 28
    assert w.bytes == 4 * (32 * 128 * 56 * 56 + 128 * 128 * 9 + 32 * 128 * 28 * 28)
    assert "output from its gradient" in w.formula
    # Forward only (no backward linked): no guess (stride 1 would count 4x here).
    assert evaluate(OpArgs.parse("aten::cudnn_convolution", dims, types, None)) is None
    # A gradient that does not fit the call (other channels) is not used.
    odd = OpArgs.parse("CudnnConvolutionBackward", "[[32, 64, 28, 28]]", '["float"]', None)
    assert evaluate(OpArgs.parse("aten::cudnn_convolution", dims, types, None, bwd=odd)) is None


def test_every_resnet50_forward_conv_gets_flops() -> None:
    import polars as pl

    convs, carried = _conv_work(RESNET)
    fwd = carried.filter(pl.col("name") == "aten::cudnn_convolution")
    assert convs.height == fwd.height == 318  # 53 convolutions x 6 steps, each carrying its work
    assert fwd["formula"].str.contains("output from its gradient").all()
    by_dims = dict(zip(fwd["input_dims"], fwd["flops"]))

    def key(x: list[int], w: list[int]) -> str:
        return json.dumps([x, w, [], [], [], [], [], [], []])

    # 2*N*K*C*R*S*P*Q by hand: the stem (7x7 stride 2, 224 -> 112), a 1x1 and a 3x3 at 56x56,
    # and layer2's first 3x3 (stride 2, 56 -> 28).
    assert by_dims[key([32, 3, 224, 224], [64, 3, 7, 7])] == 2 * 32 * 64 * 3 * 7 * 7 * 112 * 112
    assert by_dims[key([32, 64, 56, 56], [64, 64, 1, 1])] == 2 * 32 * 64 * 64 * 1 * 1 * 56 * 56
    assert by_dims[key([32, 64, 56, 56], [64, 64, 3, 3])] == 2 * 32 * 64 * 64 * 3 * 3 * 56 * 56
    assert by_dims[key([32, 128, 56, 56], [128, 128, 3, 3])] == 2 * 32 * 128 * 128 * 3 * 3 * 28 * 28
    # Per step: ResNet-50's 4.09 GMACs per 224x224 image (its 53 convolutions;
    # the fc layer is a GEMM) x 2 x batch 32 = 261.6 GFLOPs.
    per_step = fwd.group_by("step").agg(pl.col("flops").sum())["flops"]
    assert per_step.n_unique() == 1 and per_step[0] == pytest.approx(2 * 32 * 4.0872e9, rel=1e-3)
    # Independent check: the weight gradients (counted from the backward op's own
    # shapes) do exactly the forward's FLOPs, layer by layer, so in total.
    wgrad = carried.filter(pl.col("name") == "aten::cudnn_convolution_backward_weight")
    assert wgrad["flops"].sum() == fwd["flops"].sum()


def test_legacy_trace_without_dtypes_gets_conv_flops_not_bytes() -> None:
    import polars as pl

    _, carried = _conv_work(RESNET_LEGACY)
    # The 6 steps' own convolutions: the window also opens on the tail of the step before it, whose
    # 27 convolution kernels take copies of the next iteration's ops (model/earlier_launches.py), outside every step.
    fwd = carried.filter((pl.col("name") == "aten::cudnn_convolution") & pl.col("step").is_not_null())
    assert carried.filter(pl.col("name") == "aten::cudnn_convolution").height == 318 + 27
    assert fwd.height == 318 and fwd["bytes"].null_count() == 318
    _, modern = _conv_work(RESNET)
    assert fwd["flops"].sum() == modern.filter(pl.col("name") == "aten::cudnn_convolution")["flops"].sum()
