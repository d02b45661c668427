"""Views of a trace with steps count each kernel once, in its own step.

On the H100 Qwen trace the window opens on the previous iteration's tail:
463 kernels with no launch record, named from their twins one iteration
later (kinetolens.model.earlier_launches). Counting them in the module
views made layers 13-23 look twice as slow as 0-12 (2.633 ms against
1.324 ms) and the model 45.6 ms inside a 35.2 ms step.
"""

from __future__ import annotations

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.analysis.hardware.module_tree import module_tree
from kinetolens.analysis.hardware.roofline import roofline_by
from kinetolens.analysis.workload.ops import op_stats, step_time_ns
from tests.conftest import trace_path

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@pytest.fixture(scope="module")
def qwen() -> kinetolens.Trace:
    trace = kinetolens.load(trace_path(QWEN))
    assert trace.ops["from_next_iteration"].any()  # the case this file is about
    return trace


def _spread(values: list[float]) -> float:
    return max(values) / min(values)


def test_every_decoder_layer_takes_its_own_step_time(qwen):
    tree = module_tree(qwen, gpu_spec(qwen))
    layers = tree.filter(pl.col("type") == "Qwen2DecoderLayer")
    assert layers.height == 24
    assert _spread(layers["total_us"].to_list()) < 1.05, layers.select("name", "total_us")
    root = tree.filter(pl.col("depth") == 0).filter(pl.col("path") == "Qwen2Model_0")
    assert root["total_us"].item() * 1000 <= step_time_ns(qwen)  # the model inside its step


def test_ops_by_module_and_time_lost_count_each_layer_once(qwen):
    attention = op_stats(qwen, by="module").filter(pl.col("module").str.ends_with(".Qwen2Attention_0") |
                                                   pl.col("module").str.contains(r"Qwen2Attention_\d+$"))  # fmt: skip
    assert attention.height == 24 and _spread(attention["device_total_us"].to_list()) < 1.05
    lost = roofline_by(qwen, gpu_spec(qwen), by="module").filter(pl.col("module").str.contains(r"Qwen2Attention_\d+$"))
    assert lost.height == 24 and _spread(lost["lost_us"].to_list()) < 1.1, lost.select("module", "lost_us")
