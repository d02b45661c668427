"""Kernel grouping on a trace without GPU work: an empty table, never a crash.

The step share of every other grouping is taken of host time in a CPU-only
trace (``time_basis``); kernels have only device time, so their share must
stay on ``device_total_us`` whatever the trace holds.
"""

from __future__ import annotations

import json

import polars as pl
from click.testing import CliRunner

import kinetolens
from kinetolens.analysis.workload.ops import op_stats, step_time_ns, time_basis
from kinetolens.cli.main import cli
from kinetolens.views.report_data import collect
from tests.conftest import trace_path
from tests.terminal import run_cli

CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
GPU = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


def test_kernel_grouping_on_cpu_only_trace_is_empty_but_complete() -> None:
    trace = kinetolens.load(trace_path(CPU_ONLY))
    assert trace.kernels.height == 0 and time_basis(trace) == "host_total_us"
    table = op_stats(trace, by="kernel")
    assert table.height == 0
    for column in ("name", "calls", "device_total_us", "step_share_pct", "tflops_s"):
        assert column in table.columns
    # The op grouping on the same trace still ranks by host time, with a share.
    ops = op_stats(trace, by="op")
    assert ops.height > 0 and ops["step_share_pct"].drop_nulls().len() == ops.height
    assert "aten::empty" in ops["name"].to_list()


def test_kernel_step_share_is_device_time_over_step_time() -> None:
    trace = kinetolens.load(trace_path(GPU))
    table = op_stats(trace, by="kernel")
    total_ns = step_time_ns(trace)
    assert table.height > 0 and total_ns > 0
    expected = table["device_total_us"] * 1000.0 / total_ns * 100.0
    assert (table["step_share_pct"] - expected).abs().max() < 1e-9


def test_cli_kernel_grouping_on_cpu_only_trace_says_why_it_is_empty() -> None:
    runner = CliRunner()
    path = str(trace_path(CPU_ONLY))
    result = runner.invoke(cli, ["ops", path, "--aggregate-by", "kernel", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == []
    proc = run_cli("ops", path, "--aggregate-by", "kernel")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout  # no empty table: one line saying why
    assert "a CPU-only trace: no GPU was listed or used" in proc.stderr


def test_report_data_kernel_names_on_cpu_only_trace() -> None:
    data = collect(kinetolens.load(trace_path(CPU_ONLY)))
    assert data.kernel_names.height == 0
    assert data.kernel_names.schema["device_total_us"] == pl.Float64
