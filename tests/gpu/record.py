"""Keeping what the GPU suite captured: traces for CPU CI, figures for docs/GPU.md.

With ``KINETOLENS_GPU_RECORD=DIR`` (``bench/gpu_check.sh`` sets it) each
test copies the trace it checked into ``DIR`` as ``NAME.pt.trace.json.gz``
with ``NAME.expect.json`` (and the run metadata as ``NAME.kinetolens.json``): which checks of :mod:`tests.gpu.checks` apply and
the figures torch reported during the capture (FlopCounterMode's counts,
``torch.cuda.max_memory_allocated``), so ``tests/gpu_recorded/test_gpu_recorded.py`` can
run the same checks later without a GPU.  ``environment.json`` names the
GPU, driver, CUDA, cuDNN, torch and Triton versions; ``results.json``
collects what every test measured.  Committing ``DIR``'s files under
``tests/data/gpu/`` puts them in CI.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

RECORD_ENV = "KINETOLENS_GPU_RECORD"
#: The recordings' budget: CPU CI loads them all, and they live in git.
MAX_TOTAL_BYTES = 4 * 1024 * 1024


def _nvidia_smi(field: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=False).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0].strip() if out.strip() else None


def environment() -> dict[str, Any]:
    """What the traces were recorded on."""
    import torch

    props = torch.cuda.get_device_properties(0)
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "gpu": torch.cuda.get_device_name(0),
        "compute_capability": f"{props.major}.{props.minor}",
        "gpu_memory_bytes": props.total_memory,
        "driver": _nvidia_smi("driver_version"),
        "cuda_driver_api": torch._C._cuda_getDriverVersion() if hasattr(torch._C, "_cuda_getDriverVersion") else None,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
        "nsys": None,  # filled by the Nsight test: the binary used, or why none
    }


class Recorder:
    """Where a test puts its trace and its measured figures."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.results: dict[str, Any] = {}
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_env(cls) -> Recorder:
        value = os.environ.get(RECORD_ENV)
        return cls(Path(value).resolve() if value else None)

    def start(self) -> None:
        if self.folder is not None:
            self._write("environment.json", environment())

    def report(self, name: str, figures: dict[str, Any]) -> None:
        """Keep what a test measured (``results.json``) and print it (``-s``/``-rA``)."""
        self.results[name] = figures
        print(f"[gpu] {name}: {json.dumps(figures, default=str)}", file=sys.stderr)
        if self.folder is not None:
            self._write("results.json", self.results)

    def note(self, key: str, value: Any) -> None:
        """Add one fact to ``environment.json`` (e.g. whether nsys exists)."""
        if self.folder is None:
            return
        path = self.folder / "environment.json"
        env = json.loads(path.read_text()) if path.exists() else {}
        env[key] = value
        self._write("environment.json", env)

    def save(
        self, name: str, trace: Path, checks: list[str], *, capture: Path | None = None, ncu: Path | None = None,
        **figures: Any,
    ) -> None:
        """Copy ``trace`` (and its capture trace, or the Nsight Compute CSV
        paired with it, gzipped) as recording ``name``."""
        if self.folder is None:
            return
        from kinetolens.capture.layout import metadata_path

        expect: dict[str, Any] = {"trace": f"{name}.pt.trace.json.gz", "checks": checks, **figures}
        shutil.copyfile(trace, self.folder / expect["trace"])
        # the run metadata beside it (what inductor fused, for one): loaded with the trace
        if metadata_path(trace).exists():
            shutil.copyfile(metadata_path(trace), metadata_path(self.folder / expect["trace"]))
        if capture is not None:
            expect["capture"] = f"{name}.capture.pt.trace.json.gz"
            shutil.copyfile(capture, self.folder / expect["capture"])
        if ncu is not None:
            import gzip

            expect["ncu"] = f"{name}.ncu.csv.gz"
            (self.folder / expect["ncu"]).write_bytes(gzip.compress(ncu.read_bytes(), 9))
        self._write(f"{name}.expect.json", expect)

    def total_bytes(self) -> int:
        if self.folder is None:
            return 0
        return sum(p.stat().st_size for p in self.folder.glob("*.pt.trace.json.gz"))

    def _write(self, name: str, data: Any) -> None:
        assert self.folder is not None
        (self.folder / name).write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
