"""Nsight Compute's per-kernel counters paired with a kinetolens trace.

Where torch's Kineto records no hardware counters (neither the CUPTI range
profiler nor PM sampling compiled in), Nsight Compute still measures every
kernel.  It cannot run beside the PyTorch profiler (both take CUPTI), so the
step runs twice: once under ``kinetolens.profile`` for the trace, once under
``ncu`` for the counters; ``kinetolens counters TRACE --ncu CSV`` pairs them
(:mod:`kinetolens.model.ncu_pairing`).
"""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

import kinetolens
from kinetolens.capture.counter_presets import ncu_roofline_metrics
from kinetolens.capture.counters import NO_GPU_ACTIVITY_LINE
from tests.gpu import checks
from tests.gpu.models import TINY
from tests.gpu.record import Recorder
from tests.gpu.test_gpu_training import REPO, cli

STEP = REPO / "tests" / "gpu" / "ncu_step.py"
#: Where Nsight Compute's ``ncu`` is installed when it is not on PATH.
NCU_GLOBS = ("/usr/local/cuda*/bin/ncu", "/opt/nvidia/nsight-compute*/ncu", "/opt/nvidia/nsight-compute/*/ncu")
#: ncu replays each of the step's ~90 kernels once per pass: about a minute.
NCU_TIMEOUT_S = 300


def find_ncu() -> str | None:
    for exe in [shutil.which("ncu"), *(p for pattern in NCU_GLOBS for p in sorted(glob.glob(pattern), reverse=True))]:
        if exe:
            return exe
    return None


def _run(args: list[str], timeout: int = NCU_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    assert res.returncode == 0, f"{args[0]}: exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    return res


def test_ncu_counters_pair_with_the_trace(tmp_path: Path, recorder: Recorder) -> None:
    # the same step profiled twice, paired: every kernel's counters with its op
    ncu = find_ncu()
    recorder.note("ncu", ncu)
    if ncu is None:
        pytest.skip(f"no Nsight Compute: ncu is not on PATH nor in {', '.join(NCU_GLOBS)}")
    _run([sys.executable, str(STEP), "--trace", str(tmp_path / "trace")], timeout=180)
    (trace,) = sorted((tmp_path / "trace").glob("*/*.pt.trace.json.gz"))
    report = tmp_path / "step"
    # kinetolens.profile stays on under ncu: its trace gets no GPU activity, and it says so
    metrics = ncu_roofline_metrics(torch.cuda.get_device_capability())
    under = _run([ncu, "--profile-from-start", "off", "--metrics", ",".join(metrics), "-f",
                  "-o", str(report), sys.executable, str(STEP), "--trace", str(tmp_path / "under_ncu")])  # fmt: skip
    said = [line for line in (under.stdout + under.stderr).splitlines() if line == NO_GPU_ACTIVITY_LINE]
    assert len(said) == 1, (under.stdout + under.stderr)[-3000:]
    exported = _run([ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw", "--print-units", "base"])
    csv = tmp_path / "step.csv"
    csv.write_text(exported.stdout)

    res = cli("counters", str(trace), "--ncu", str(csv), "--json", "--no-cache", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout)
    assert rows and {r["pairing"] for r in rows} == {"kernel name, grid and block"}
    got = checks.check_ncu_counters(kinetolens.load(trace, ncu=csv, cache=False))
    assert len(rows) == got["profiled_kernels"]
    table = cli("counters", str(trace), "--ncu", str(csv), "--no-cache", "-w", "80", cwd=tmp_path)
    assert table.returncode == 0 and "profiled by Nsight Compute" in " ".join(table.stdout.split()), table.stdout[-2000:]
    recorder.save("ncu_step", trace, ["ncu_counters"], ncu=csv, config=TINY.__dict__)
    recorder.report("ncu_step", got)
