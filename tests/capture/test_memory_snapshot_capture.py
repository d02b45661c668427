"""``kinetolens.profile(memory_snapshot=True)`` / ``kinetolens run --memory-snapshot``: the
CUDA allocator's history, dumped beside each trace; without CUDA, one clear error before
anything is profiled.  The GPU suite checks a real snapshot's peak against
``torch.cuda.max_memory_allocated`` (tests/gpu/test_gpu_memory_snapshot.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import kinetolens
from kinetolens.capture.counters import CaptureUnsupportedError
from kinetolens.capture.memory_snapshot import snapshot_path

#: The first two check a machine without CUDA; the file name holds everywhere.
without_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")


@without_cuda
def test_without_cuda_it_is_one_error_before_profiling(tmp_path: Path) -> None:
    with pytest.raises(CaptureUnsupportedError, match=r"^kinetolens.profile: cannot record a memory snapshot: (this torch build .* has no CUDA support|no CUDA device is available)$"):
        with kinetolens.profile(logdir=tmp_path, run="snap", memory_snapshot=True):
            torch.ones(2) + 1
    assert not list(tmp_path.rglob("*.gz"))
    with kinetolens.profile(logdir=tmp_path, run="after", with_stack=False) as again:  # the profiler is free again
        torch.ones(2) + 1
    assert len(again.trace_files) == 1


@without_cuda
def test_run_with_memory_snapshot_without_cuda_exits_2(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(
        """
        import torch, kinetolens
        for _ in range(4):
            torch.ones(4) * 2
            kinetolens.step()
        print("done")
        """
    ))  # fmt: skip
    res = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "run", "--logdir", str(tmp_path / "runs"), "--memory-snapshot",
         "--", sys.executable, str(script)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert res.stdout == "done\n"
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("kinetolens:")]
    assert "cannot record a memory snapshot" in line


def test_the_snapshot_is_named_after_its_trace() -> None:
    trace = Path("/runs/job/host_12.1700000000000.pt.trace.json.gz")
    assert snapshot_path(trace) == Path("/runs/job/host_12.1700000000000.memory_snapshot.pickle")
