"""``kinetolens run`` says what happened when no trace was written.

a script that never started (``python missing.py``)
and counters that cannot be collected were both reported as "no process got
through skip + warmup steps after profiling began", which never began.
Each case runs the real CLI on a real command.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def kl_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "run", "--logdir", str(tmp_path / "runs"), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip


def reported(proc: subprocess.CompletedProcess[str], run: str, tmp_path: Path) -> str:
    """The launcher's one line about the missing trace."""
    lines = [x for x in proc.stderr.splitlines() if x.startswith("kinetolens:")]
    assert len(lines) == 1, proc.stderr
    prefix = f"kinetolens: no trace written to {tmp_path / 'runs' / run}: "
    assert lines[0].startswith(prefix), lines[0]
    assert "warmup" not in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    return lines[0][len(prefix) :]


def test_script_that_does_not_exist(tmp_path: Path) -> None:
    proc = kl_run(tmp_path, "--", sys.executable, "missing.py")
    assert proc.returncode == 2, proc.stderr  # python's own status for a missing script
    assert "missing.py" in proc.stderr  # python's message passes through
    assert reported(proc, "missing", tmp_path) == f"{Path(sys.executable).name} exited with status 2 before importing torch"


def test_script_that_fails_after_importing_torch(tmp_path: Path) -> None:
    proc = kl_run(tmp_path, "--run", "crash", "--", sys.executable, "-c", "import torch, sys; sys.exit(7)")
    assert proc.returncode == 7, proc.stderr
    assert "exited with status 7 before profiling began" in reported(proc, "crash", tmp_path)


def test_script_that_never_imports_torch(tmp_path: Path) -> None:
    proc = kl_run(tmp_path, "--run", "plain", "--", sys.executable, "-c", "print('hi')")
    assert proc.returncode == 0 and proc.stdout == "hi\n", proc.stderr
    assert reported(proc, "plain", tmp_path) == f"{Path(sys.executable).name} never imported torch"


def test_command_that_is_not_python(tmp_path: Path) -> None:
    proc = kl_run(tmp_path, "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert "started no Python process" in reported(proc, "true", tmp_path)


def _cupti_ok() -> bool:
    import torch

    return torch.cuda.is_available() and torch.backends.cuda.is_built()


@pytest.mark.skipif(_cupti_ok(), reason="this machine can collect CUPTI counters")
def test_counters_that_cannot_be_collected(tmp_path: Path) -> None:
    """Two processes arm (a parent that starts a child): the reason is said once."""
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """
            import subprocess, sys
            import torch, kinetolens
            if len(sys.argv) == 1:
                subprocess.run([sys.executable, __file__, "child"], check=True)
            for _ in range(4):
                torch.ones(4) * 2
                kinetolens.step()
            print("done")
            """
        )
    )
    proc = kl_run(tmp_path, "--counters", "roofline", "--", sys.executable, str(script))
    assert proc.returncode == 2, proc.stderr  # the job succeeded, the profile did not
    assert proc.stdout == "done\ndone\n"
    reason = reported(proc, "job", tmp_path)
    assert reason.startswith("could not start profiling: cannot collect hardware counters (")
    assert "CUDA" in reason


def test_script_name_that_is_not_utf8(tmp_path: Path) -> None:
    """torch's stack recording refuses such a file name; the reason and the way
    around it are said, and --no-stack does record."""
    name = os.fsdecode(b"caf\xe9.py")
    (tmp_path / name).write_text(
        "import torch\nm = torch.nn.Linear(4, 4)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(6):\n    m(torch.ones(2, 4)).sum().backward()\n    opt.step()\n"
    )
    proc = kl_run(tmp_path, "--run", "latin", "--", sys.executable, name)
    # 2 when the script then exits 0; torch 2.13 may also crash at exit after
    # the failed step (SIGSEGV, 139), which passes through as the child's status.
    assert proc.returncode in (2, 139), proc.stderr
    reason = reported(proc, "latin", tmp_path)
    assert "utf-8" in reason.lower() and "--no-stack" in reason, reason
    proc = kl_run(tmp_path, "--run", "latin", "--no-stack", "--", sys.executable, name)
    assert proc.returncode == 0 and "kinetolens: wrote " in proc.stderr, proc.stderr


def test_logdir_that_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    logdir = tmp_path / "file" / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "run", "--logdir", str(logdir), "--",
         sys.executable, "-c", "print('ran')"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr  # refused before the command ran
    (line,) = proc.stderr.splitlines()
    assert line.startswith("kinetolens: error: ") and "cannot create the run folder" in line, line
