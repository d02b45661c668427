"""kinetolens diff says first when the two runs ran on different GPUs or software:
an A100 baseline against a V100 experiment is 60% slower
for reasons no op delta explains."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kinetolens
from kinetolens.analysis.diff import compare
from kinetolens.views.dashboard import compare as dashboard_compare
from kinetolens.views.dashboard.sources import Ctx
from kinetolens.views.dashboard.state import Loaded
from tests.conftest import trace_path

CONTROL = "hta/trace_diff/control/control.json.gz"  # rank 3 of 8 on A100s
TEST = "hta/trace_diff/test/test.json.gz"  # rank 1 of 2 on V100s
RESNET_A = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RESNET_B = "kineto/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz"
QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
A100, V100 = "NVIDIA A100-PG509-200", "Tesla V100-SXM2-16GB"


@pytest.fixture(scope="module")
def pair() -> tuple[kinetolens.Trace, kinetolens.Trace]:
    return kinetolens.load(trace_path(CONTROL)), kinetolens.load(trace_path(TEST))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "diff", *args], capture_output=True, text=True, timeout=300, env=env
    )


def test_summary_compares_the_environments(pair: tuple[kinetolens.Trace, kinetolens.Trace]) -> None:
    # the analysis exposes the comparison as data.
    env = compare(*pair, levels=["step"]).summary["environment"]
    # The GPU names, compute capabilities and world sizes as the files' deviceProperties and
    # distributedInfo hold them (see MANIFEST.md); Kineto records no torch version.
    assert env["baseline"] == {"gpu": A100, "compute_capability": "8.0", "torch": None, "cuda": None, "world_size": 8}
    assert env["experiment"] == {"gpu": V100, "compute_capability": "7.0", "torch": None, "cuda": None, "world_size": 2}
    assert env["differs"] == ["gpu", "compute_capability", "world_size"]
    assert env["unknown"] == ["torch", "cuda"]


def test_environment_reads_torch_and_cuda_where_the_trace_records_them() -> None:
    # TraceLens' H100 traces carry the harness's torch_env_info and Kineto's
    # cuda_runtime_version (12040).
    from kinetolens.analysis.diff_environment import environment

    env = environment(kinetolens.load(trace_path(QWEN)))
    assert env["gpu"] == "NVIDIA H100 80GB HBM3" and env["compute_capability"] == "9.0"
    assert env["torch"] == "2.6.0+cu124" and env["cuda"] == "12.4"


def test_cli_warns_before_any_number() -> None:
    # the warning is the first thing printed.
    proc = _cli(str(trace_path(CONTROL)), str(trace_path(TEST)), "-t", "3")
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout[: proc.stdout.index("kinetolens diff")]
    assert head.startswith("Warning: different environments")
    flat = " ".join(head.split())
    assert f"GPU {A100} → {V100}" in flat and "world size 8 → 2" in flat
    # CSV goes to stdout untouched; the warning to stderr.
    proc = _cli(str(trace_path(CONTROL)), str(trace_path(TEST)), "--csv", "-t", "3")
    assert proc.returncode == 0 and proc.stdout.startswith("name,")
    assert "different environments" in proc.stderr and A100 in proc.stderr
    # --json carries the comparison in its summary.
    proc = _cli(str(trace_path(CONTROL)), str(trace_path(TEST)), "--json", "-t", "1")
    assert json.loads(proc.stdout)["summary"]["environment"]["differs"] == ["gpu", "compute_capability", "world_size"]


def test_same_environment_has_no_warning() -> None:
    # two ResNet-50 runs on the same V100 box.
    proc = _cli(str(trace_path(RESNET_A)), str(trace_path(RESNET_B)), "-t", "1")
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stdout
    assert "same GPU Tesla V100-DGXS-32GB" in " ".join(proc.stdout.split())


def test_dashboard_diff_view_warns_first(pair: tuple[kinetolens.Trace, kinetolens.Trace]) -> None:
    # In the dashboard's Diff view (HTML).
    ctx = Ctx(loaded=Loaded(pair[0]), step=None, args={}, other=Loaded(pair[1]))
    blocks = dashboard_compare.diff_view(ctx)
    assert blocks[0]["type"] == "diff-picker"
    assert blocks[1]["type"] == "text" and blocks[1]["kind"] == "warn"
    assert A100 in blocks[1]["text"] and V100 in blocks[1]["text"]


def _capture(logdir: Path) -> Path:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x = torch.randn(32, 64)
    with kinetolens.profile(logdir=logdir, run="base", steps=2, warmup=1, profile_memory=False) as prof:
        for _ in range(3):
            model(x).sum().backward()
            prof.step()
    return prof.trace_files[0]


def test_torch_versions_from_kinetolens_run_metadata(tmp_path: Path) -> None:
    # kinetolens.profile records torch's version beside the trace; the loader
    # reads it and diff compares it.  A second torch build cannot be installed here, so the other
    # run is a copy of a real capture whose metadata names another version (the only edited field).
    from kinetolens.analysis.diff_environment import environment
    from kinetolens.formats import RUN_METADATA_KEY, metadata_name

    torch = pytest.importorskip("torch")
    trace = _capture(tmp_path)
    loaded = kinetolens.load(trace, cache=False)
    assert loaded.metadata[RUN_METADATA_KEY]["torch_version"] == str(torch.__version__)
    assert environment(loaded)["torch"] == str(torch.__version__)
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(trace, other / trace.name)
    meta: dict[str, Any] = json.loads((trace.parent / metadata_name(trace.name)).read_text())
    meta["torch_version"] = "2.5.1+cu121"
    (other / metadata_name(trace.name)).write_text(json.dumps(meta))
    proc = _cli(str(trace), str(other / trace.name), "--no-cache", "-t", "1")
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    assert flat.startswith(f"Warning: different environments (baseline → experiment): torch {torch.__version__} → 2.5.1+cu121")
    # The unedited copy compares as the same environment.
    proc = _cli(str(trace), str(trace), "--no-cache", "-t", "1")
    assert "Warning" not in proc.stdout and f"torch {torch.__version__}" in proc.stdout


def test_diff_module_level_keeps_the_work_inside_step_ranges_recorded_as_ops() -> None:
    # Same fault in diff's module level: this 2021 trace records ProfilerStep#N
    # as cpu_op, so every op inside a step had the step range as its top-level op, and the module
    # level, which skips the ranges, lost all of it: 64,437 us of the 100,593 us of GPU time a step.
    a, b = (kinetolens.load(trace_path(p)) for p in (RESNET_A, RESNET_B))
    d = compare(a, b, levels=["module"])
    in_steps = a.kernels.filter(a.kernels["step"].is_not_null())
    per_step_us = in_steps["dur"].sum() / 1000.0 / a.steps.height
    assert d.tables["module"]["baseline_us"].sum() == pytest.approx(per_step_us)


def test_torch_versions_recorded_by_another_harness_differ() -> None:
    # TraceLens' Qwen traces from an MI300X (torch 2.7.0 built from source) and
    # an H100 (torch 2.6.0+cu124), as their harness's torch_env_info records them.
    mi300 = "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    env = compare(kinetolens.load(trace_path(mi300)), kinetolens.load(trace_path(QWEN)), levels=["step"]).summary[
        "environment"
    ]
    assert env["differs"] == ["gpu", "compute_capability", "torch"]
    assert (env["baseline"]["torch"], env["experiment"]["torch"]) == ("2.7.0+gitf717b2a", "2.6.0+cu124")
    assert (env["baseline"]["gpu"], env["experiment"]["gpu"]) == ("AMD Instinct MI300X VF", "NVIDIA H100 80GB HBM3")
