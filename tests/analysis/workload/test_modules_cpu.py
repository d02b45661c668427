"""``kinetolens modules`` on a CPU-only capture shows host times, as ``ops`` does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.hardware.module_tree import NO_MODULE, module_tree
from kinetolens.analysis.workload.ops import op_stats, rank_basis
from tests.cpu_capture import capture_small_mlp


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return capture_small_mlp(tmp_path_factory.mktemp("cpu_modules"))[0]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, timeout=300)


def test_modules_of_a_cpu_capture_are_host_times(cpu_trace: Path) -> None:
    # Modules on CPU: was exit 2 ("no GPU kernels"); now host time, the basis `ops` ranks a CPU trace by
    trace = kinetolens.load(cpu_trace)
    assert trace.kernels.height == 0 and rank_basis(trace) == "host_self_us"
    tree = module_tree(trace)
    # each module's total is its ops' host time, as `ops --by module` counts it (top-level ops per module)
    stats = op_stats(trace, by="module").select(path=pl.col("module").fill_null(NO_MODULE), host_total_us="host_total_us")
    leaves = tree.join(stats, on="path")
    assert set(leaves["path"]) >= {"Sequential_0.Linear_0", "Sequential_0.Linear_1", "Sequential_0.ReLU_0", NO_MODULE}
    assert leaves["total_us"].to_list() == pytest.approx(leaves["host_total_us"].to_list(), rel=1e-6)
    root = tree.row(by_predicate=pl.col("path") == "Sequential_0", named=True)
    assert root["fwd_total_us"] > 0 and root["bwd_total_us"] > 0 and root["step_share_pct"] > 0

    proc = _cli("modules", str(cpu_trace), "--no-cache")
    assert proc.returncode == 0, proc.stderr
    assert "no GPU kernels: times are host (CPU) time" in proc.stdout
    proc = _cli("modules", str(cpu_trace), "--no-cache", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["path"]: r for r in json.loads(proc.stdout)}
    assert rows["Sequential_0"]["total_us"] == pytest.approx(root["total_us"])
