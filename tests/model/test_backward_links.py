"""Backward -> forward links: a sequence number that names an op of another kind is no link."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kinetolens import load
from kinetolens.model.backward_names import fits
from tests.conftest import trace_path

WRAP = "autograd::engine::evaluate_function: "
MISMATCH = "backward ops whose sequence number names an op of another kind"


def _roots(ops: pl.DataFrame) -> pl.DataFrame:
    """Backward nodes (outermost backward ops) other than AccumulateGrad, with their forward op."""
    return ops.filter(
        (pl.col("grad_fn") == pl.col("name")) & ~pl.col("name").str.contains("AccumulateGrad")
    ).select("op_id", "name", "fwd_op", "fwd_link")


@pytest.mark.parametrize(("grad_fn", "fwd_op"), [
    ("AddmmBackward0", "aten::addmm"), ("AddmmBackward0", "aten::linear"),
    ("MmBackward0", "aten::mm"), ("MmBackward0", "aten::matmul"), ("MmBackward0", "aten::linear"),
    ("ConvolutionBackward0", "aten::convolution"), ("ConvolutionBackward0", "aten::conv2d"),
    ("ConvolutionBackward0", "aten::_convolution"), ("CudnnConvolutionBackward", "aten::cudnn_convolution"),
    ("ToCopyBackward0", "aten::_to_copy"), ("ToCopyBackward0", "aten::to"),
    ("ViewBackward0", "aten::view"), ("ViewBackward0", "aten::reshape"),
    ("NativeLayerNormBackward0", "aten::native_layer_norm"), ("NativeLayerNormBackward0", "aten::layer_norm"),
    ("CudnnBatchNormBackward0", "aten::cudnn_batch_norm"), ("NativeBatchNormBackward0", "aten::batch_norm"),
    ("LogSoftmaxBackward0", "aten::_log_softmax"), ("NllLossBackward0", "aten::nll_loss_forward"),
    ("MaxPool2DWithIndicesBackward0", "aten::max_pool2d_with_indices"), ("ReluBackward1", "aten::relu_"),
    ("AddBackward0", "aten::add_"), ("SqueezeBackward3", "aten::squeeze_"), ("PowBackward0", "aten::square"),
    ("UnsafeViewBackward0", "aten::_unsafe_view"), ("ReshapeAliasBackward0", "aten::_reshape_alias"),
    ("ScaledDotProductFlashAttentionForCpuBackward0", "aten::_scaled_dot_product_flash_attention_for_cpu"),
    (WRAP + "TBackward0", "aten::t"),
    # Not ATen names: nothing to judge them by.
    ("torch::autograd::CppNode<SplitLookupFunction_rowwise_adagrad_Op>", "aten::zero_"),
    ("CompiledFunctionBackward", "CompiledFunction"),
    ("torch::jit::(anonymous namespace)::DifferentiableGraphBackward", "aten::pow"),
    ("All2All_Pooled_ReqBackward", "All2All_Pooled_Req"),
])
def test_legitimate_pairs_fit(grad_fn: str, fwd_op: str) -> None:
    assert fits(grad_fn, fwd_op)


@pytest.mark.parametrize(("grad_fn", "fwd_op"), [
    (WRAP + "NativeLayerNormBackward0", "aten::addmm"),
    (WRAP + "SplitBackward0", "aten::addmm"),
    ("MmBackward0", "aten::conv2d"),
    ("ConvolutionBackward0", "aten::addmm"),
])
def test_other_families_do_not_fit(grad_fn: str, fwd_op: str) -> None:
    assert not fits(grad_fn, fwd_op)


def test_colliding_sequence_numbers_leave_the_node_unlinked() -> None:
    # A sampled trace: the creators of three nodes were dropped, and their
    # sequence numbers name the aten::addmm (inside aten::linear) recorded
    # with the same number.
    trace = load(trace_path("hta/trace_filter/sampled_rank-0.json.gz"))
    ops = trace.ops
    collided = ops.filter(pl.col("sequence_number").is_in([1098410, 1098278, 1096632]))
    nodes = collided.filter(pl.col("grad_fn") == pl.col("name")).sort("sequence_number")
    assert nodes["name"].str.strip_prefix(WRAP).to_list() == [
        "NativeLayerNormBackward0", "SplitBackward0", "NativeLayerNormBackward0"
    ]
    assert collided.filter(pl.col("direction") == "fprop")["name"].unique().sort().to_list() == ["aten::addmm", "aten::linear"]
    assert nodes["fwd_op_id"].null_count() == 3
    roots = _roots(ops)
    assert roots.filter(pl.col("name").str.contains("NativeLayerNorm"))["fwd_op"].drop_nulls().unique().to_list() == [
        "aten::native_layer_norm"
    ]
    assert all(fits(g, f) for g, f in roots.filter(pl.col("fwd_op").is_not_null()).select("name", "fwd_op").iter_rows())
    assert [(w.kind, w.count) for w in trace.warnings if w.kind == MISMATCH] == [(MISMATCH, 3)]


@pytest.mark.parametrize("rel", [
    "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/trace_filter/sampled_rank-1.json.gz",
    "tracelens/perf_model/normalization/normalization_layer_test.json.gz",
])
def test_no_sequence_number_link_is_dropped_elsewhere(rel: str) -> None:
    # Over all stored traces the rule drops 3 of 9,054 links, all in
    # sampled_rank-0; these traces keep every link.
    trace = load(trace_path(rel))
    assert not [w for w in trace.warnings if w.kind == MISMATCH]
    linked = _roots(trace.ops).filter(pl.col("fwd_op").is_not_null())
    assert linked.height > 0
    assert all(fits(g, f) for g, f in linked.select("name", "fwd_op").iter_rows())


_LOOP = r'''
import sys, torch, torch.nn as nn, torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
torch.manual_seed(0)
conv, bn, emb, ln = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Embedding(20, 8), nn.LayerNorm(8)
lin, head = nn.Linear(8, 8), nn.Linear(8, 3, bias=False)
img, tok = torch.randn(2, 3, 6, 6), torch.randint(0, 20, (2, 4))
class Scale(torch.autograd.Function):  # a custom node: "ScaleBackward" <- the "Scale" range
    @staticmethod
    def forward(ctx, x):
        return x.mul(2)
    @staticmethod
    def backward(ctx, g):
        return g * 2
def loss():
    x = F.max_pool2d(F.relu(bn(conv(img))), 2).flatten(1)[:, :8]
    h = lin(ln(emb(tok))).reshape(2, 4, 8)
    a = F.scaled_dot_product_attention(h, h, h).transpose(1, 2).contiguous().view(2, -1)
    y = torch.matmul(Scale.apply(a[:, :8]) + x, torch.ones(8, 8)).to(torch.float64).float()
    return F.cross_entropy(head(y), torch.zeros(2, dtype=torch.long))
loss().backward()
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
    for _ in range(2):  # a training loop on one thread, without step ranges
        loss().backward()
p.export_chrome_trace(sys.argv[1])
'''


def test_cpu_training_loop_links_every_node(tmp_path: Path) -> None:
    # Real torch on CPU: forward and backward run on one thread.  Every node
    # of both iterations links to a forward op of its own kind, and the
    # second iteration's forward pass stays forward (it was once taken for
    # engine work between two backward nodes).
    import subprocess
    import sys

    script, out = tmp_path / "loop.py", tmp_path / "loop.json"
    script.write_text(_LOOP)
    subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True)
    trace = load(out)
    roots = _roots(trace.ops)
    assert roots.height >= 40 and roots["fwd_op"].null_count() == 0
    assert all(fits(g, f) for g, f in roots.select("name", "fwd_op").iter_rows())
    assert not [w for w in trace.warnings if w.kind == MISMATCH]
    assert roots.filter(pl.col("name").str.ends_with("ScaleBackward"))["fwd_op"].to_list() == ["Scale", "Scale"]
    convs = trace.ops.filter(pl.col("name") == "aten::conv2d")
    assert convs.height == 2 and (convs["direction"].cast(pl.String) == "fprop").all()
