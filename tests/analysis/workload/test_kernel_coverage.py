"""Every kernel's GPU time is in a row of the op table, and annotations' totals hold their children."""

from __future__ import annotations

import polars as pl
from click.testing import CliRunner

import kinetolens
from kinetolens.analysis.workload.annotations import annotation_stats
from kinetolens.analysis.workload.ops import kernel_coverage, op_stats
from kinetolens.cli.main import cli
from tests.conftest import trace_path

DLRM_RANK0 = "param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json.gz"
DECODE = "tracelens/b300/qwen3_30b_a3b_decode/1782799835.6885648-TP-0-DECODE.trace.json.gz"


def _kernel_us(trace) -> float:
    return trace.kernels.filter(pl.col("dur") > 0)["dur"].sum() / 1000.0


def test_nccl_kernels_under_annotations_are_their_ops_self_time() -> None:
    # DLRM rank 0: 5.8 ms of its 6.85 ms of kernels are NCCL kernels inside
    # ``nccl:*`` ranges; the op rows held only 1.05 ms of them.
    trace = kinetolens.load(trace_path(DLRM_RANK0))
    stats = op_stats(trace)
    assert abs(stats["device_self_us"].sum() - _kernel_us(trace)) < 1e-6
    comms = stats.filter(pl.col("name") == "record_param_comms")
    assert comms["device_self_us"][0] > 5000.0
    assert stats["step_share_pct"].sum() <= 100.0
    covered, whole = kernel_coverage(trace)
    assert covered == whole == _kernel_us(trace)


def test_replayed_kernels_under_a_step_annotation_get_its_row() -> None:
    # A graph-replay decode step: 6.16 ms of 6.30 ms of kernels ran under
    # ``step[DECODE bs=16]``, which no op encloses.
    trace = kinetolens.load(trace_path(DECODE))
    stats = op_stats(trace)
    step = stats.filter(pl.col("name") == "step[DECODE bs=16]")
    assert step.height == 1 and step["device_self_us"][0] > 6000.0
    assert abs(stats["device_self_us"].sum() - _kernel_us(trace)) < 1e-6
    assert stats["step_share_pct"].sum() <= 100.0


def test_ops_footer_states_kernel_coverage() -> None:
    result = CliRunner().invoke(cli, ["ops", str(trace_path(DLRM_RANK0)), "--top", "3"])
    assert result.exit_code == 0, result.output
    assert "kernel time in the table: 100.0% of the 6.851 ms" in result.output


def test_annotation_totals_hold_their_children_across_threads() -> None:
    # The backward ops run on autograd's thread, inside ``## backward ##`` on
    # the main thread: the annotation read 10 us against 2.8 ms of kernels,
    # and ProfilerStep less than its nccl:* ranges.
    trace = kinetolens.load(trace_path(DLRM_RANK0))
    table = annotation_stats(trace)
    total = dict(zip(table["name"].to_list(), table["device_total_us"].to_list()))
    assert total["ProfilerStep#*"] == _kernel_us(trace)
    assert total["ProfilerStep#*"] >= total["nccl:all_to_all"] + total["nccl:all_reduce"]
    assert total["## backward ##"] > 2500.0
    assert table["device_self_us"].sum() <= total["ProfilerStep#*"]
    assert table["step_share_pct"].sum() <= 100.0
