"""FLOPs of real CPU runs, profiled and loaded, against torch's own FlopCounterMode.

Each model runs once under ``FlopCounterMode`` and once under
``torch.profiler`` (record_shapes); the exported trace goes through
``kinetolens.load`` and ``op_work``.  Where FlopCounterMode counts an op our
total for it must be equal; where we differ on purpose the test computes the
difference by hand and says why.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import (
    FlopCounterMode,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

import kinetolens
from kinetolens.analysis.workload.work import kernel_work, op_work

CONV_FORWARD = {
    "aten::_convolution", "aten::convolution", "aten::mkldnn_convolution", "aten::slow_conv3d",
    "aten::slow_conv3d_forward", "aten::_slow_conv2d_forward", "aten::slow_conv_transpose2d",
    "aten::slow_conv_transpose3d", "aten::slow_conv_dilated2d", "aten::_conv_depthwise2d",
}


def _run(tmp_path: Path, fn: Callable[[], None]) -> tuple[dict[str, float], dict[str, float], pl.DataFrame]:
    """(our FLOPs per op name, FlopCounterMode's per op name, our op_work rows with names)."""
    torch.manual_seed(0)
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    theirs = {str(k).replace("aten.", "aten::"): float(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = kinetolens.load(path, cache=False)
    work = op_work(trace).join(trace.ops.select("op_id", "name", "direction"), on="op_id")
    ours: dict[str, float] = defaultdict(float)
    for name, flops in work.select("name", "flops").iter_rows():
        ours[name] += flops
    return dict(ours), theirs, work


def test_gemm_ops_equal_flop_counter(tmp_path: Path) -> None:
    mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    proj = nn.Linear(8, 12, bias=False)

    def fn() -> None:
        a = torch.randn(3, 5, 6, requires_grad=True)
        b = torch.randn(3, 6, 4, requires_grad=True)
        y = mlp(torch.randn(21, 16)).sum() + proj(torch.randn(2, 7, 8)).sum()
        y = y + torch.bmm(a, b).sum() + torch.matmul(a, b).sum() + torch.einsum("bij,bjk->bik", a, b).sum()
        y = y + torch.baddbmm(torch.randn(3, 5, 4), a, b).sum() + torch.mm(a[0], b[0]).sum()
        y.backward()

    ours, theirs, work = _run(tmp_path, fn)
    gemm = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
    assert set(theirs) == gemm
    for name in gemm:
        assert ours[name] == theirs[name], name
    # linear/matmul/einsum deferred to the products they called: counted once
    assert not {"aten::linear", "aten::matmul", "aten::einsum"} & set(ours)
    # backward products were counted too (each bmm grad is two bmms)
    assert work.filter(pl.col("direction") == "bprop")["name"].is_in(list(gemm)).sum() >= 6


def test_convolutions_equal_flop_counter(tmp_path: Path) -> None:
    net = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.Conv2d(8, 8, 3, stride=2, dilation=1), nn.ConvTranspose2d(8, 4, 2, stride=2))
    c1, c3 = nn.Conv1d(3, 5, 3), nn.Conv3d(2, 4, 3, padding=1)

    def fn() -> None:
        x = torch.randn(2, 4, 10, 10, requires_grad=True)
        y = net(x).sum() + c1(torch.randn(2, 3, 12)).sum() + c3(torch.randn(1, 2, 5, 6, 7, requires_grad=True)).sum()
        y.backward()

    ours, theirs, _ = _run(tmp_path, fn)
    forward = sum(v for k, v in ours.items() if k in CONV_FORWARD)
    assert forward == theirs["aten::convolution"] > 0
    assert ours["aten::convolution_backward"] == theirs["aten::convolution_backward"] > 0
    # the conv1d input needs no grad: its backward is wgrad only (2*N*out*prod(w) = 2*2*10*45)
    # hand total: conv2d 2*2*100*288 + conv2d 2*2*16*576 + convT 2*2*16*128 + conv1d 1800 + conv3d 2*210*216
    assert forward == 115200 + 36864 + 8192 + 1800 + 90720


def test_grouped_convolution_weight_gradient(tmp_path: Path) -> None:
    """Grouped convs: forward and dgrad equal FlopCounterMode; wgrad differs, and we are right.

    FlopCounterMode computes the weight gradient as conv(input^T, grad_out^T)
    with all C_in input channels, but each of the ``groups`` weight slices
    only sums over its own C_in/groups channels: the real wgrad work equals
    the forward's.  FlopCounterMode over-counts it by the factor ``groups``.
    """
    conv = nn.Conv2d(8, 12, 3, groups=4)
    convt = nn.ConvTranspose1d(4, 6, 3, stride=2, groups=2)
    x = torch.randn(2, 8, 9, 9)
    xt = torch.randn(2, 4, 9)

    def fn() -> None:  # inputs need no grad: the backward is the weight gradient only
        (conv(x).sum() + convt(xt).sum()).backward()

    ours, theirs, _ = _run(tmp_path, fn)
    fwd_conv = 2 * 2 * 7 * 7 * (12 * 2 * 3 * 3)  # 2*N*out*prod(weight)
    fwd_convt = 2 * 2 * 9 * (4 * 3 * 3)  # 2*N*in*prod(weight)
    assert sum(v for k, v in ours.items() if k in CONV_FORWARD) == theirs["aten::convolution"] == fwd_conv + fwd_convt
    assert ours["aten::convolution_backward"] == fwd_conv + fwd_convt
    assert theirs["aten::convolution_backward"] == 4 * fwd_conv + 2 * fwd_convt


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_forward_backward(tmp_path: Path, causal: bool) -> None:
    """CPU flash attention: FlopCounterMode has no entry for the CPU op, so we check
    against its own SDPA formulas; causal counts half (FlopCounterMode ignores the mask)."""
    shape = (2, 4, 16, 8)
    q, k, v = (torch.randn(*shape, requires_grad=True) for _ in range(3))

    def fn() -> None:
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).sum().backward()

    ours, theirs, _ = _run(tmp_path, fn)
    half = 0.5 if causal else 1.0
    assert ours["aten::_scaled_dot_product_flash_attention_for_cpu"] == half * sdpa_flop_count(shape, shape, shape)
    assert ours["aten::_scaled_dot_product_flash_attention_for_cpu_backward"] == half * sdpa_backward_flop_count(
        shape, shape, shape, shape
    )
    assert "aten::scaled_dot_product_attention" not in ours  # the composite deferred
    assert theirs == {}  # nothing for FlopCounterMode to compare on this path


def test_sdpa_math_path_counts_its_products(tmp_path: Path) -> None:
    """With the math backend the attention is made of bmm/matmul calls: we count
    those (the composite defers to GEMMs), equal to FlopCounterMode."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.randn(2, 3, 10, 8, requires_grad=True) for _ in range(3))

    def fn() -> None:
        with sdpa_kernel(SDPBackend.MATH):
            F.scaled_dot_product_attention(q, k, v, dropout_p=0.0).sum().backward()

    ours, theirs, _ = _run(tmp_path, fn)
    assert theirs
    for name, flops in theirs.items():
        assert ours[name] == flops, name
    # forward: two products; backward: two per product, with the scores kept (no recompute)
    assert sum(ours.values()) >= sum(theirs.values()) == 3 * sdpa_flop_count(*[(2, 3, 10, 8)] * 3)


def test_norms_softmax_loss_embedding(tmp_path: Path) -> None:
    """Ops FlopCounterMode does not cover: our per-element conventions, from real recorded args."""
    emb, ln, head = nn.Embedding(50, 16), nn.LayerNorm(16), nn.Linear(16, 8)
    bn = nn.BatchNorm1d(16)

    def fn() -> None:
        h = ln(emb(torch.randint(0, 50, (3, 7))))  # 21 rows x 16
        logits = head(h).reshape(-1, 8)
        y = F.cross_entropy(logits, torch.randint(0, 8, (21,))) + torch.softmax(logits, -1).sum()
        y = y + bn(h.reshape(-1, 16)).sum()
        y.backward()

    ours, theirs, work = _run(tmp_path, fn)
    n = 21 * 16
    assert ours["aten::native_layer_norm"] == 7 * n  # 5 + weight + bias
    assert ours["aten::native_layer_norm_backward"] == 11 * n  # 8 input + 2 weight + 1 bias
    assert ours["aten::native_batch_norm"] == 7 * n
    assert ours["aten::_log_softmax"] == ours["aten::_softmax"] == 5 * 21 * 8
    assert ours["aten::_softmax_backward_data"] == ours["aten::_log_softmax_backward_data"] == 4 * 21 * 8
    assert ours["aten::nll_loss_forward"] == ours["aten::nll_loss_backward"] == 21
    assert ours["aten::embedding_dense_backward"] == n
    assert set(theirs) == {"aten::addmm", "aten::mm"}
    assert ours["aten::addmm"] == theirs["aten::addmm"] and ours["aten::mm"] == theirs["aten::mm"]
    byname = dict(work.select("name", "bytes").iter_rows())
    # layer norm fp32: x read, y written, weight+bias read, mean+rstd per row written
    assert byname["aten::native_layer_norm"] == 4 * (2 * n + 2 * 16 + 2 * 21)
    # embedding gathers 21 rows of 16 and writes them; the int64 indices are read
    assert byname["aten::index_select"] == 2 * 4 * n + 8 * 21
    assert "aten::cross_entropy_loss" not in ours and "aten::layer_norm" not in ours


def test_kernel_work_empty_on_cpu_trace(tmp_path: Path) -> None:
    """A CPU-only trace has no kernels: kernel_work is empty with its columns, not an error."""
    def fn() -> None:
        torch.mm(torch.randn(4, 4), torch.randn(4, 4))

    ours, _, _ = _run(tmp_path, fn)
    assert ours["aten::mm"] == 2 * 4 * 4 * 4
    trace = kinetolens.load(tmp_path / "trace.json", cache=False)
    kw = kernel_work(trace)
    assert kw.height == 0 and kw.columns == ["kernel_id", "flops", "bytes", "estimated"]
