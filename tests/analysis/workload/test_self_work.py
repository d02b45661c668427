"""An op row ranked by self time shows the work and roof of the same kernels as its time.

The op carrying a formula (``aten::zero_``, ``aten::relu``,
``aten::_scaled_dot_product_flash_attention``) is often not the one that
launched the kernel (``aten::fill_``, ``aten::clamp_min``,
``aten::_flash_attention_forward``): the self-time row must get its
kernels' work and roof, and work that is not known reads unknown, not 0.
"""

from __future__ import annotations


import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.analysis.hardware.roofline import roofline_by, with_time_lost
from kinetolens.analysis.workload.ops import op_stats
from kinetolens.analysis.workload.work import kernel_work
from tests.terminal import cli_text
from tests.conftest import trace_path

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@pytest.fixture(scope="module")
def resnet() -> kinetolens.Trace:
    return kinetolens.load(trace_path(RESNET))


def test_self_row_work_is_that_of_its_own_kernels(resnet: kinetolens.Trace) -> None:
    stats = op_stats(resnet).filter(pl.col("name") == "aten::fill_")
    fill_ops = resnet.ops.filter(pl.col("name") == "aten::fill_")["op_id"].implode()
    own = resnet.kernels.filter(pl.col("op_id").is_in(fill_ops)).select("kernel_id")
    expected = own.join(kernel_work(resnet), on="kernel_id")["bytes"].sum()
    assert expected > 1e6  # zeroing gradients moves megabytes, not the 24 B of the few fills carrying work
    assert stats["bytes"][0] == pytest.approx(expected)
    assert stats["gbps"][0] > 100


def test_self_row_roof_is_that_of_its_own_kernels(resnet: kinetolens.Trace) -> None:
    spec = gpu_spec(resnet)
    table = with_time_lost(op_stats(resnet), resnet, spec)
    clamp = table.filter(pl.col("name") == "aten::clamp_min")
    relu = roofline_by(resnet, spec).filter(pl.col("op") == "aten::relu_")
    assert clamp["pct_of_roof"][0] == pytest.approx(relu["pct_of_roof"][0], abs=0.5)
    # an op with no formula anywhere near its own kernels has no work, not its child's
    pool = table.filter(pl.col("name") == "aten::max_pool2d_with_indices_backward")
    assert pool["gbps"][0] is None and pool["pct_of_roof"][0] is None


def _row(text: str, name: str) -> list[str]:
    return next(line.split() for line in text.splitlines() if line.split()[:1] == [name])


@pytest.mark.parametrize("columns", [80, 120])
def test_ops_table_shows_work_and_roof_where_the_kernels_are(columns: int) -> None:
    text = cli_text("ops", str(trace_path(RESNET)), "-t", "14", "-c", "name,gbps,pct_of_roof", columns=columns)
    assert _row(text, "aten::clamp_min")[-1] == "91.82"
    assert float(_row(text, "aten::fill_")[1].replace(",", "")) > 100
    text = cli_text("ops", str(trace_path(QWEN)), "-t", "40", "-c", "name,gbps,pct_of_roof", columns=columns)
    assert _row(text, "aten::_flash_attention_forward")[-1] != "-"
    assert _row(text, "aten::cat")[1] == "-"  # bytes not known: unknown, not 0 GB/s
