"""The bound label of a grouped roofline row agrees with the row's own numbers:
``compute`` exactly where its arithmetic intensity reaches the ridge point
(peak of its precision's ceiling over DRAM bandwidth) of the trace's GPU."""

from __future__ import annotations

import polars as pl

import kinetolens
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.analysis.hardware.roofline import peak_tflops, roofline_by
from tests.conftest import trace_path

MI300_RESNET = "tracelens/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz"


def test_bound_label_agrees_with_intensity_and_ridge_on_mi300x() -> None:
    trace = kinetolens.load(trace_path(MI300_RESNET))
    spec = gpu_spec(trace)
    assert spec is not None and spec.dram_gbps
    for by in ("op", "module"):
        rows = roofline_by(trace, spec, by).filter((pl.col("flops") > 0) & pl.col("bytes").is_not_null())
        assert rows.height > 0
        for r in rows.iter_rows(named=True):
            ridge = peak_tflops(spec, r["ceiling"]) * 1e3 / spec.dram_gbps
            expected = "compute" if r["intensity"] >= ridge else "memory"
            assert r["bound"] == expected, (by, r[rows.columns[0]], r["intensity"], ridge, r["bound"])
    conv = roofline_by(trace, spec, "op").filter(pl.col("op") == "aten::convolution_backward").row(0, named=True)
    # bf16 Tensor/Matrix-core ridge of the MI300X in the registry: ~247 FLOP/byte
    assert conv["intensity"] > 247 and conv["bound"] == "compute"
