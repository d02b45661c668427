"""Figures, the HTML report (rendered in headless Chromium offline) and the markdown report."""

from __future__ import annotations

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.idle import idle_breakdown, temporal_breakdown
from kinetolens.analysis.kernels import kernel_table
from kinetolens.analysis.memory import memory_curve, memory_events
from kinetolens.analysis.ops import op_stats
from kinetolens.analysis.overview import step_breakdown
from kinetolens.views import figures
from tests.conftest import trace_path

BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


@pytest.fixture(scope="module")
def bert() -> kinetolens.Trace:
    return kinetolens.load(trace_path(BERT))


def test_step_bars_add_up_to_each_step(bert: kinetolens.Trace) -> None:
    table = step_breakdown(bert)
    fig = figures.step_breakdown_figure(table)
    stacked = [sum(tr.y[i] for tr in fig.data) for i in range(table.height)]
    # Every instant of a step is in exactly one category, so the bars are the step's wall time.
    assert stacked == pytest.approx((table["total"] / 1e6).to_list(), rel=1e-9)
    assert {tr.name for tr in fig.data} >= {"kernel", "memcpy", "cpu_exec", "other"}


def test_module_icicle_root_is_all_attributed_gpu_time(bert: kinetolens.Trace) -> None:
    modules = op_stats(bert, by="module")
    tree = figures.module_tree(modules)
    roots = tree.filter(pl.col("parent") == "")
    # Every kernel and memcpy of this trace runs under the model's module, so the
    # root holds the whole GPU time (kernels 307.197 us + memcpy 2.240 us).
    assert roots["id"].to_list() == ["BertLMHeadModel_0"]
    assert roots["total"].item() == pytest.approx(bert.kernels["dur"].sum() / 1000.0, abs=1e-6)
    # A parent is the sum of its own time and its children's.
    kids = tree.group_by("parent").agg(pl.col("total").sum().alias("kids"))
    checked = tree.join(kids, left_on="id", right_on="parent")
    assert checked.height > 5
    assert (checked["total"] - checked["own"] - checked["kids"]).abs().max() < 1e-6
    fig = figures.module_icicle_figure(modules)
    assert fig.data[0].type == "icicle" and fig.data[0].branchvalues == "total"


def test_tensor_core_pie_covers_all_gpu_time(bert: kinetolens.Trace) -> None:
    kernels = kernel_table(bert)
    pie = figures.tensor_core_figure(kernels).data[0]
    shares = dict(zip(pie.labels, pie.values, strict=True))
    assert sum(shares.values()) == pytest.approx(kernels["dur_us"].sum())
    assert shares["yes"] == pytest.approx(kernels.filter(pl.col("tc") == "yes")["dur_us"].sum())
    assert shares["yes"] > 0 and shares["no"] > 0


def test_top_ops_pie_keeps_the_rest_as_other(bert: kinetolens.Trace) -> None:
    ops = op_stats(bert)
    pie = figures.top_ops_figure(ops, top=3, kind="pie").data[0]
    assert len(pie.labels) == 4 and pie.labels[-1] == "other"
    assert sum(pie.values) == pytest.approx(ops["device_total_us"].sum())
    bar = figures.top_ops_figure(ops, top=3).data[0]
    assert bar.x[-1] == pytest.approx(ops["device_total_us"].max())  # largest drawn last (top of a horizontal bar)


def test_memory_and_idle_figures(bert: kinetolens.Trace) -> None:
    curve = memory_curve(memory_events(bert))
    fig = figures.memory_figure(curve)
    names = [tr.name for tr in fig.data]
    assert "GPU0 allocated" in names and "GPU0 reserved" in names
    gpu = curve.filter(pl.col("device") == "GPU0")
    drawn = next(tr for tr in fig.data if tr.name == "GPU0 allocated")
    assert max(drawn.y) == pytest.approx(gpu["allocated"].max() / 2**30)
    temporal = figures.temporal_figure(temporal_breakdown(bert))
    assert sum(tr.x[0] for tr in temporal.data) == pytest.approx(100.0, abs=0.05)
    idle = figures.idle_figure(idle_breakdown(bert))
    assert sum(sum(tr.y) for tr in idle.data) == pytest.approx(idle_breakdown(bert)["idle_us"].sum())


def test_cpu_only_trace_gives_explaining_empty_figures() -> None:
    t = kinetolens.load(trace_path(CPU_ONLY))
    fig = figures.tensor_core_figure(kernel_table(t))
    assert not fig.data and "no GPU kernels" in fig.layout.annotations[0].text
    assert not figures.memory_figure(memory_curve(memory_events(t))).data
