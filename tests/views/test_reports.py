"""Report behaviour that the golden comparisons do not pin down."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.workload.ops import op_stats, step_time_ns
from tests.conftest import trace_path

CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"


def test_step_share_uses_host_time_when_the_trace_has_no_kernels() -> None:
    trace = kinetolens.load(trace_path(CPU_ONLY), cache=False)
    assert trace.kernels.height == 0
    # ops rank and share by (host) self time, and only time inside a step counts toward
    # the share of the steps' wall time: this trace's four aten::empty calls all lie outside its one step.
    from kinetolens.analysis.workload.ops import rank_basis

    assert rank_basis(trace) == "host_self_us"
    top = op_stats(trace).sort("host_self_us", descending=True).row(0, named=True)
    assert top["name"] == "aten::empty" and top["host_self_us"] > 0
    assert top["step_share_pct"] == 0.0
    inclusive = op_stats(trace, inclusive=True).row(0, named=True)
    assert inclusive["step_share_pct"] == 0.0


def test_step_share_uses_device_time_when_the_trace_has_kernels() -> None:
    trace = kinetolens.load(trace_path(BERT), cache=False)
    step = int(trace.steps["step"][0])
    stats = op_stats(trace, step=step).filter(pl.col("device_self_us") > 0)  # the share is of self time
    row = stats.row(0, named=True)
    assert row["step_share_pct"] == pytest.approx(row["device_self_us"] * 1000.0 / step_time_ns(trace, step) * 100.0)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, timeout=120
    )


def test_ops_columns_option_selects_and_rejects() -> None:
    path = str(trace_path(BERT))
    proc = _cli("ops", path, "-t", "3", "-c", "name,calls,device_total_us", "--json", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == 3 and all(list(r) == ["name", "calls", "device_total_us"] for r in rows)
    proc = _cli("ops", path, "-c", "name,bogus", "--no-cache")
    assert proc.returncode == 2
    assert "bogus" in proc.stderr and "Traceback" not in proc.stderr
