"""A fresh clone without ../shared: the suite collects, and corpus tests skip with one reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import CORPUS_MISSING

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("src", "tests", "bench", "docs", "README.md", "pyproject.toml")


def _clone(tmp_path: Path) -> Path:
    """The checkout's files in ``tmp_path/repo``, with no ``shared`` folder beside it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, repo / name)
    assert not (tmp_path / "shared").exists()
    return repo


def _pytest(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KINETOLENS_REQUIRE_CORPUS"}
    env["PYTHONPATH"] = str(repo / "src")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-o", "addopts=-ra", "-p", "no:cacheprovider", *args],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_collection_succeeds_and_corpus_tests_skip_with_one_reason(tmp_path: Path) -> None:
    repo = _clone(tmp_path)
    collected = _pytest(repo, "--collect-only", "-q")
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert "error" not in collected.stdout.splitlines()[-1], collected.stdout[-3000:]
    ran = _pytest(repo, "-q", "-rs", "tests/ingest/test_nsys.py", "tests/cli/test_critical_path_cli.py")
    assert ran.returncode == 0, ran.stdout[-3000:]
    skips = [line for line in ran.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and all(line.endswith(CORPUS_MISSING) for line in skips), ran.stdout[-3000:]
