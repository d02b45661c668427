"""Step shares of op-tree roots, module roots and ops add up to at most 100%.

The share counts only what ran in the steps (not kernels of the previous
iteration's tail copied from the next one, nor work outside the steps), and
where GPU streams ran at once it is of their summed GPU time, which the
table then says.
"""

from __future__ import annotations

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.hardware.module_tree import module_tree
from kinetolens.analysis.workload.op_tree import op_tree
from kinetolens.analysis.workload.ops import op_stats, share_whole_note
from tests.conftest import trace_path

QWEN_H100 = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
CONTROL = "hta/trace_diff/control/control.json.gz"


def _roots(frame: pl.DataFrame) -> float:
    return float(frame.filter(pl.col("depth") == 0)["step_share_pct"].sum())


@pytest.fixture(scope="module")
def qwen() -> kinetolens.Trace:
    return kinetolens.load(trace_path(QWEN_H100), cache=False)


@pytest.fixture(scope="module")
def control() -> kinetolens.Trace:
    return kinetolens.load(trace_path(CONTROL), cache=False)


def test_op_tree_roots_count_only_the_step_on_one_stream(qwen: kinetolens.Trace) -> None:
    # One stream, one step of 35.18 ms: 13.7 ms of kernels ran outside it (the earlier iteration's tail).
    tree_share = _roots(op_tree(qwen))
    assert tree_share <= 100.0
    assert tree_share == pytest.approx(90.68, abs=0.01)
    # ops --tree and modules count the same kernels against the same step
    assert tree_share == pytest.approx(_roots(module_tree(qwen)), abs=0.01)
    assert share_whole_note(qwen) is None  # one stream: shares of the wall time


def test_concurrent_streams_share_of_summed_gpu_time(control: kinetolens.Trace) -> None:
    # Four streams: 501.6 ms of GPU time in six steps of 465.0 ms wall time.
    note = share_whole_note(control)
    assert note is not None and "501.57 ms" in note and "465.01 ms" in note
    modules = _roots(module_tree(control))
    assert modules == pytest.approx(100.0, abs=0.01)  # every kernel runs in a step, all under a root
    assert _roots(op_tree(control)) <= 100.0
    assert float(op_stats(control)["step_share_pct"].sum()) <= 100.0
