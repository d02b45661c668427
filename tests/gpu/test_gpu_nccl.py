"""Two NCCL ranks on the machine's one GPU, each under ``kinetolens.profile``;
``kinetolens dist`` over the run compares them (NCCL kernels per rank,
collectives matched).  NCCL may refuse two ranks on one device ("Duplicate
GPU detected"): then the test is skipped with NCCL's own words, and the
multi-rank path stays tested by the gloo runs on the CPU and the corpus'
8-rank NCCL job."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _env() -> dict[str, str]:
    """This checkout first on the path, the machine's own path (the wheels' site) after it."""
    paths = [str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def test_two_nccl_ranks_on_one_gpu(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, str(HERE / "nccl_job.py"), str(tmp_path)], capture_output=True,
                         text=True, timeout=300, env=_env())  # fmt: skip
    refused = re.search(r"Duplicate GPU detected[^\n]*|ncclInvalidUsage[^\n]*", res.stderr)
    if res.returncode != 0 and refused:
        pytest.skip(f"NCCL refuses two ranks on one GPU: {refused.group(0).strip()}")
    assert res.returncode == 0, res.stderr[-3000:]
    traces = sorted((tmp_path / "nccl").glob("*.pt.trace.json.gz"))
    assert len(traces) == 2, traces
    out = subprocess.run([sys.executable, "-m", "kinetolens.cli.main", "dist", "--json", str(tmp_path / "nccl")],
                         capture_output=True, text=True, timeout=300, env=_env())  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["run"]["backend"] == "nccl" and [r["rank"] for r in doc["ranks"]] == [0, 1], doc["run"]
