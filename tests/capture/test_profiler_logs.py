"""A capture's terminal: torch's profiler log lines (USDT probes, the CPU
allocator's note on blocks allocated before the window) are kept off it,
while the program's own stderr passes through in order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = """
import os, sys, torch, kinetolens
x = torch.randn(256, 256)  # allocated before the window: torch's CPUAllocator note when freed inside it
with kinetolens.profile(logdir=sys.argv[1], run="cpu", profile_memory=True) as prof:
    print("program: before", file=sys.stderr, flush=True)
    y = x @ x
    del x
    os.write(2, b"program: raw fd 2\\n")
    z = (y @ y).sum()
print("program: after", file=sys.stderr)
"""


def test_profiler_log_lines_are_kept_off_the_terminal(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path)], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert not [line for line in lines if "USDT" in line or "CPUAllocator" in line], proc.stderr
    assert [line for line in lines if line.startswith("program:")] == [
        "program: before", "program: raw fd 2", "program: after",
    ], proc.stderr  # fmt: skip
    assert list(tmp_path.rglob("*.pt.trace.json.gz"))
