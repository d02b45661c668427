"""``kinetolens run`` says so when its command dies inside the profiling
window, rather than blaming skip + warmup."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
SCRIPT = textwrap.dedent("""
    import os, signal, torch
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(6):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        if step == 3:  # profiling began after the second optimizer step
            os.kill(os.getpid(), signal.SIG{sig})
""")


@pytest.mark.parametrize(("sig", "said"), [("KILL", "was killed by SIGKILL (signal 9)"), ("TERM", "was killed by SIGTERM (signal 15)")])
def test_a_command_killed_inside_the_profiling_window_is_reported_as_killed(tmp_path: Path, sig: str, said: str) -> None:
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(SCRIPT.format(sig=sig))
    proc = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "run", "--logdir", str(tmp_path / "runs"), "--cpu-only",
         "--skip", "0", "--warmup", "0", "--steps", "10", "--", sys.executable, "train.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=dict(os.environ, COLUMNS="200", PYTHONPATH=str(SRC)),
    )  # fmt: skip
    lines = [x for x in proc.stderr.splitlines() if x.startswith("kinetolens: no trace")]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert said in lines[0] and "inside the profiling window" in lines[0], lines[0]
    assert "no partial trace was written" in lines[0]
    assert "skip + warmup" not in lines[0] and "Traceback" not in proc.stderr
