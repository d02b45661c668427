"""Activation checkpointing: forward recomputed in backward is marked and counted once under its module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import kinetolens
from kinetolens.analysis.hardware.module_tree import module_tree
from kinetolens.analysis.workload.ops import share_whole_ns
from kinetolens.cli.main import cli

CHECKPOINTED = """
import sys, torch, kinetolens
from torch.utils.checkpoint import checkpoint
torch.manual_seed(0)
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 256)
        self.fc2 = torch.nn.Linear(256, 256)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = torch.nn.Linear(256, 4)
    def forward(self, x):
        return self.head(checkpoint(self.block, x, use_reentrant=sys.argv[2] == "reentrant"))
model = Net()
x = torch.randn(64, 256, requires_grad=True)
with kinetolens.profile(logdir=sys.argv[1], run="ckpt", steps=2, warmup=1, profile_memory=False) as prof:
    for _ in range(3):
        model(x).sum().backward()
        prof.step()
print(prof.trace_files[0])
"""


def _capture(logdir: Path, mode: str) -> Path:
    pytest.importorskip("torch")
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run(
        [sys.executable, "-c", CHECKPOINTED, str(logdir), mode], check=False, capture_output=True, text=True, timeout=300, env=clean
    )
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=["non-reentrant", "reentrant"])
def checkpointed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _capture(tmp_path_factory.mktemp(f"ckpt_{request.param}"), request.param)


def test_recomputed_ops_are_recompute_under_the_full_module_path(checkpointed: Path) -> None:
    trace = kinetolens.load(checkpointed, cache=False)
    again = trace.ops.filter(pl.col("direction") == "recompute")
    assert again.height > 0
    # the recompute's stack starts at Block_0; its module is the forward's Net_0.Block_0...
    assert set(again["module"].drop_nulls().to_list()) <= {
        "Net_0.Block_0", "Net_0.Block_0.Linear_0", "Net_0.Block_0.Linear_1",
    }  # fmt: skip
    assert "aten::addmm" in again["name"].to_list()
    # the forward pass itself stays forward
    assert trace.ops.filter((pl.col("direction") == "fprop") & (pl.col("module") == "Net_0.Block_0.Linear_0")).height


def test_recompute_counts_once_in_the_module_tree(checkpointed: Path) -> None:
    trace = kinetolens.load(checkpointed, cache=False)
    tree = module_tree(trace)
    roots = tree.filter(pl.col("depth") == 0)
    assert set(roots["path"].to_list()) == {"Net_0", "(no module)"}
    assert roots["step_share_pct"].sum() <= 100.0
    stepped_us = share_whole_ns(trace) / 1000.0
    steps = trace.steps
    assert steps.height == 2
    assert roots["total_us"].sum() <= stepped_us * 1.001
    block = tree.filter(pl.col("path") == "Net_0.Block_0").row(0, named=True)
    assert block["recompute_total_us"] > 0
    head = tree.filter(pl.col("path") == "Net_0.Linear_2").row(0, named=True)
    assert head["recompute_total_us"] == 0
    for row in tree.iter_rows(named=True):
        parts = row["fwd_total_us"] + row["bwd_total_us"] + row["recompute_total_us"]
        assert parts <= row["total_us"] + 1e-6


def test_modules_command_shows_recompute(checkpointed: Path) -> None:
    result = CliRunner().invoke(cli, ["modules", str(checkpointed), "--no-cache"])
    assert result.exit_code == 0, result.output
    assert "recompute" in result.output
    assert "\nBlock_0" not in result.output  # no second root for the recomputed block
