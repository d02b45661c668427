"""Run the real CLI as a user's terminal would: a subprocess at a given width, or piped."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def run_cli(*args: str, columns: int | None = 80, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``kinetolens ARGS`` with ``COLUMNS=columns`` (None: no COLUMNS, as when piped)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(POLARS_MAX_THREADS="1", PYTHONPATH=SRC + os.pathsep + env.get("PYTHONPATH", ""))
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args],
        capture_output=True, text=True, timeout=300, env=env, cwd=cwd,
    )  # fmt: skip


def run_many(calls: dict[str, tuple[tuple[str, ...], int | None]]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Several CLI runs at once (process start-up dominates): name -> (args, columns)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(run_cli, *args, columns=cols) for name, (args, cols) in calls.items()}
        return {name: f.result() for name, f in futures.items()}


def cli_text(*args: str, columns: int | None = 80) -> str:
    """The stdout of ``kinetolens ARGS`` at ``columns``, which must succeed."""
    proc = run_cli(*args, columns=columns)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
