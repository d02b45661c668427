"""``kinetolens COMMAND TRACE ...`` run as a user runs it: a fresh process, no cache."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def kinetolens(command: str, path: Path, *options: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """The command's exit status, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", command, str(path), "--no-cache", *options],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def kinetolens_json(command: str, path: Path, *options: str) -> tuple[Any, str]:
    """The command's ``--json`` document (it must succeed) and its stderr."""
    res = kinetolens(command, path, "--json", *options)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout), res.stderr
