"""An FP8 GEMM (``torch._scaled_mm``, e4m3 inputs, bf16 out) and a bf16 GEMM of
the same shape under ``kinetolens.profile``: each op's FLOPs are 2*M*N*K,
both ran on Tensor Cores, the roofline puts the FP8 one under the FP8 roof
(precision ``fp8``) and the bf16 one under the bf16 roof.  Skipped where the
GPU has no FP8 (compute capability below 8.9)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

import kinetolens
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.analysis.hardware.roofline import op_roofline

M = N = K = 4096


def test_fp8_and_bf16_gemms_of_one_shape(tmp_path: Path) -> None:
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 GEMMs need compute capability 8.9 or more")
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
    one = torch.tensor(1.0, device="cuda")
    a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
    for _ in range(3):  # cuBLASLt's heuristics and workspaces
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        a16 @ b16
    torch.cuda.synchronize()
    with kinetolens.profile(logdir=tmp_path, run="fp8", with_stack=False) as prof:
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        a16 @ b16
        torch.cuda.synchronize()
    trace = kinetolens.load(prof.trace_files[0], cache=False)
    roof = op_roofline(trace, gpu_spec(trace)).filter(pl.col("name").is_in(["aten::_scaled_mm", "aten::mm"]))
    rows = {r["name"]: r for r in roof.to_dicts()}
    assert set(rows) == {"aten::_scaled_mm", "aten::mm"}, roof
    for name, row in rows.items():
        assert row["flops"] == 2 * M * N * K, name
        assert row["tc"] == "yes", name
        assert 0 < row["achieved_tflops"] <= row["peak_tflops"] * 1.05, name
    assert rows["aten::_scaled_mm"]["precision"] == "fp8" and rows["aten::mm"]["precision"] == "bf16"
    assert rows["aten::_scaled_mm"]["peak_tflops"] > rows["aten::mm"]["peak_tflops"]
