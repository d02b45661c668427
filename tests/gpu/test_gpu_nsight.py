"""Nsight Systems: a training script marked with ``kinetolens.nvtx()`` profiled
by ``nsys``, its SQLite export loaded, kernels attributed to the marked ops.

``nsys`` is often not on PATH where Nsight Compute (``ncu``) is: the test
looks for the binary where CUDA toolkits and Nsight Systems installers put
it, and where there is none it records that in ``environment.json`` and
skips, saying where it looked.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

import polars as pl

import kinetolens
from tests.gpu import checks
from tests.gpu.models import NVTX_SCRIPT
from tests.gpu.record import Recorder
from tests.gpu.test_gpu_training import REPO

#: Where Nsight Systems' ``nsys`` is installed when it is not on PATH.
NSYS_GLOBS = (
    "/usr/local/cuda*/bin/nsys",
    "/usr/local/cuda*/nsight-systems*/bin/nsys",
    "/usr/local/cuda*/nsight-systems*/target-linux-x64/nsys",
    "/opt/nvidia/nsight-systems*/bin/nsys",
    "/opt/nvidia/nsight-systems*/*/bin/nsys",
    "/opt/nvidia/nsight-systems*/*/target-linux-x64/nsys",
    "/usr/lib/nsight-systems*/bin/nsys",
    "/usr/lib/x86_64-linux-gnu/nsight-systems*/bin/nsys",
    # Nsight Compute ships a copy that may record (.qdstrm) without making a report
    "/opt/nvidia/nsight-compute*/*/host/target-linux-x64/nsys",
    "/opt/nvidia/nsight-compute*/host/target-linux-x64/nsys",
)


#: A whole GPU check has 10 minutes: an nsys that hangs must not take them.
NSYS_TIMEOUT_S = 180


def find_nsys() -> tuple[str | None, str]:
    """(a working nsys, its version line) or (None, why not)."""
    candidates = [p for p in [shutil.which("nsys")] if p]
    for pattern in NSYS_GLOBS:
        candidates += sorted(glob.glob(pattern), reverse=True)  # newest version first
    tried = []
    for exe in dict.fromkeys(candidates):
        try:
            res = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            tried.append(f"{exe}: {exc}")
            continue
        if res.returncode == 0:
            return exe, res.stdout.strip().splitlines()[0] if res.stdout.strip() else "?"
        tried.append(f"{exe}: exit {res.returncode}")
    where = "PATH and " + ", ".join(NSYS_GLOBS)
    return None, f"no working Nsight Systems binary (looked in {where})" + (f"; tried {'; '.join(tried)}" if tried else "")


def test_nsys_profile_of_nvtx_marked_script(tmp_path: Path, recorder: Recorder) -> None:
    # nsys (if an Nsight Systems binary exists) profiles kinetolens.nvtx() ranges; SQLite loaded
    exe, about = find_nsys()
    ncu = shutil.which("ncu") or next(iter(sorted(glob.glob("/usr/local/cuda*/bin/ncu"))), None)
    recorder.note("nsys", {"binary": exe, "about": about})
    recorder.note("ncu", ncu)
    if exe is None:
        recorder.report("nsys", {"absent": about})
        pytest.skip(about)
    out = tmp_path / "nvtx"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    try:
        res = subprocess.run(
            [exe, "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--export=sqlite",
             "--force-overwrite=true", f"--output={out}", sys.executable, "-c", NVTX_SCRIPT, str(REPO)],
            capture_output=True, text=True, timeout=NSYS_TIMEOUT_S, check=False, cwd=tmp_path, env=env,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        why = f"{exe} ({about}) did not finish within {NSYS_TIMEOUT_S} s"
        recorder.note("nsys", {"binary": exe, "about": about, "report": why})
        pytest.skip(why)
    assert "trained" in res.stdout, (res.stdout[-2000:], res.stderr[-2000:])  # the job itself ran
    sqlite = out.with_suffix(".sqlite")
    if not sqlite.exists():
        last = (res.stderr.strip().splitlines() or res.stdout.strip().splitlines() or ["no output"])[-1]
        why = f"{exe} ({about}) recorded but made no report: exit {res.returncode}, {last}"
        recorder.note("nsys", {"binary": exe, "about": about, "report": why,
                               "files": sorted(p.name for p in tmp_path.iterdir())})  # fmt: skip
        recorder.report("nsys", {"no_report": why})
        pytest.skip(why)
    trace = kinetolens.load(sqlite, cache=False)
    assert trace.format == "nsys-sqlite"
    recorder.note("nsys", {"binary": exe, "about": about, "report": "sqlite export loaded"})
    kernels = checks.compute_kernels(trace)
    assert kernels.height > 0
    op = float(kernels.filter(pl.col("op").is_not_null())["dur"].sum()) / float(kernels["dur"].sum())
    module = float(kernels.filter(pl.col("module").is_not_null())["dur"].sum()) / float(kernels["dur"].sum())
    gemm_ops = kernels.filter(pl.col("op").is_in(checks.GEMM_OPS))
    recorder.report("nsys", {"binary": exe, "version": about, "kernels": kernels.height, "op": op, "module": module,
                             "gemm_kernels": gemm_ops.height})  # fmt: skip
    # every step ran inside kinetolens.nvtx(): its markers name each kernel's op
    assert op >= checks.OP_SHARE
    # forward GEMMs carry the module path of their marker
    assert gemm_ops.height > 0 and gemm_ops["module"].is_not_null().any()
