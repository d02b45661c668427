"""An op reading a broadcast view (``aten::expand`` just before it) reads the
view's storage, not its logical size: its roof counts those bytes, so the
measured kernel does not beat the memory roof."""

from __future__ import annotations

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.analysis.hardware.roofline import roofline_by
from kinetolens.analysis.workload.work import op_work
from tests.conftest import trace_path

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


@pytest.fixture(scope="module")
def resnet() -> kinetolens.Trace:
    return kinetolens.load(trace_path(RESNET), cache=False)


def test_mean_backward_div_reads_the_unexpanded_gradient(resnet: kinetolens.Trace) -> None:
    # MeanBackward1: expand [32, 2048, 1, 1] -> [32, 2048, 7, 7], then div by 49 (one MulScalar kernel, 24 us).
    work = op_work(resnet).filter(pl.col("op_id") == 2049).row(0, named=True)
    read, written = 32 * 2048 * 4, 32 * 2048 * 7 * 7 * 4
    assert work["bytes"] == read + written  # 13.1 MB, not 25.7 MB


def test_div_within_its_memory_roof(resnet: kinetolens.Trace) -> None:
    div = roofline_by(resnet, gpu_spec(resnet)).filter(pl.col("op") == "aten::div").row(0, named=True)
    assert div["calls"] == 6 and div["device_us"] == pytest.approx(144.0)
    assert div["pct_of_roof"] <= 100.0
    assert div["pct_of_roof"] == pytest.approx(60.68, abs=0.01)
