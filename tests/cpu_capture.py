"""A small real CPU training run captured with ``kinetolens.profile`` in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SMALL_MLP = """
import sys, torch, kinetolens
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
x = torch.randn(8, 32)
with kinetolens.profile(logdir=sys.argv[1], run="cpu", steps=2, warmup=1, profile_memory=False) as prof:
    for _ in range(3):
        model(x).sum().backward()
        prof.step()
print(prof.trace_files[0])
"""


def capture_small_mlp(logdir: Path, **env: str) -> tuple[Path, str]:
    """(trace, the capture's stderr); launcher variables of the test's own
    environment are dropped so the run is a single process unless ``env`` says otherwise."""
    return capture_script(SMALL_MLP, logdir, **env)


def capture_script(script: str, logdir: Path, **env: str) -> tuple[Path, str]:
    """:func:`capture_small_mlp` of another ``script`` (it takes the logdir as
    its argument and prints the trace's path last)."""
    pytest.importorskip("torch")
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(logdir)], capture_output=True, text=True, timeout=300, env={**clean, **env}
    )
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1]), proc.stderr
