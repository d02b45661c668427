"""A run with one corrupt rank: the other ranks are analysed and the bad one is named.

Eight real DLRM ranks (NCCL on V100s), one of them overwritten with bytes that
are no trace. dist, critical-path RUNDIR and report RUNDIR each report the
seven others and name the eighth with its error in one line, exit 0;
``--strict`` stops with that line and exit 2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TRACES

DLRM = TRACES / "param" / "dlrm_kineto"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if not DLRM.is_dir():
        pytest.skip("../shared (the trace corpus) is not beside the checkout")
    out = tmp_path_factory.mktemp("run8")
    for f in sorted(DLRM.glob("*.json.gz")):
        shutil.copyfile(f, out / f.name)
    bad = sorted(out.glob("worker3_*.json.gz"))[0]
    bad.write_bytes(b"this is not a trace\n")
    return out, bad


def _kinetolens(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KINETOLENS_CACHE_DIR": str(tmp / "cache"), "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "kinetolens.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def _names_the_bad_rank(stderr: str, bad: Path) -> None:
    assert "Traceback" not in stderr, stderr[-2000:]
    lines = [line for line in stderr.splitlines() if str(bad) in line]
    assert len(lines) == 1 and "not a JSON trace" in lines[0], stderr


def test_dist_reports_the_seven_good_ranks(run, tmp_path):
    rundir, bad = run
    done = _kinetolens("dist", str(rundir), tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    _names_the_bad_rank(done.stderr, bad)
    assert done.stdout.startswith("7 ranks of world size 8")


def test_strict_stops_at_the_bad_rank(run, tmp_path):
    rundir, bad = run
    done = _kinetolens("dist", str(rundir), "--strict", tmp=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and str(bad) in done.stderr


def test_critical_path_and_report_over_the_seven(run, tmp_path):
    rundir, bad = run
    path = _kinetolens("critical-path", str(rundir), tmp=tmp_path)
    assert path.returncode == 0, path.stderr
    _names_the_bad_rank(path.stderr, bad)
    assert "across 7 ranks" in path.stdout
    out = tmp_path / "r.md"
    report = _kinetolens("report", str(rundir), "--format", "md", "-o", str(out), tmp=tmp_path)
    assert report.returncode == 0, report.stderr
    text = out.read_text()
    assert "7 ranks of world size 8" in text and bad.name in text
