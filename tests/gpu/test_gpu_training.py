"""A small transformer trained in bf16 with autocast, profiled on the GPU by
``kinetolens.profile`` and by ``kinetolens run``, and ``kinetolens demo
--device cuda``: kernels attributed to ops, modules and forward ops, Tensor
Cores found for the bf16 GEMMs and not for fp32 elementwise kernels, GEMM
and attention FLOPs equal to FlopCounterMode's, the memory peak equal to
torch's own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

import kinetolens
from tests.gpu import checks
from tests.gpu.models import RUN_SCRIPT, SMALL, Trainer, flop_counts, profile_two_steps
from tests.gpu.record import Recorder

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``kinetolens ARGS`` in a fresh interpreter that imports this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "kinetolens.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory, recorder: Recorder) -> dict[str, Any]:
    """Three warm-up steps, FlopCounterMode on a fourth, then one unrecorded
    and two recorded steps under ``kinetolens.profile`` with the peak
    memory statistics reset just before it."""
    trainer = Trainer(SMALL, "cuda")
    for _ in range(3):  # cuBLAS handles, autotuning, AdamW state
        trainer.step()
    counts = flop_counts(trainer)
    path, peak = profile_two_steps(trainer, tmp_path_factory.mktemp("profile"), "profile_bf16")
    kept = ["attribution", "tensor_cores", "gemm_flops", "memory_peak"]
    if checks.attention_flops(counts):  # FlopCounterMode has a formula for the attention backend torch chose
        kept.insert(3, "attention_flops")
    recorder.save("profile_bf16", path, kept, flop_counter=counts, max_memory_allocated=peak, config=SMALL.__dict__)
    return {"trace": kinetolens.load(path, cache=False), "flop_counter": counts, "peak": peak}


def test_profile_attribution(profiled: dict[str, Any], recorder: Recorder) -> None:
    # kernels to op >= 99%, module >= 95%, backward to forward op >= 95%
    recorder.report("profile_bf16.attribution", checks.check_attribution(profiled["trace"]))


def test_profile_tensor_cores(profiled: dict[str, Any], recorder: Recorder) -> None:
    # tc yes for the bf16 GEMMs, no for fp32 elementwise kernels
    recorder.report("profile_bf16.tensor_cores", checks.check_tensor_cores(profiled["trace"]))


def test_profile_gemm_flops_equal_flop_counter(profiled: dict[str, Any], recorder: Recorder) -> None:
    # each GEMM's FLOPs equal torch.utils.flop_counter's for the same model
    recorder.report("profile_bf16.gemm_flops", checks.check_gemm_flops(profiled["trace"], profiled["flop_counter"]))


def test_profile_attention_flops_equal_flop_counter(profiled: dict[str, Any], recorder: Recorder) -> None:
    # the fused attention (flash / cuDNN / efficient) counted like FlopCounterMode
    if not checks.attention_flops(profiled["flop_counter"]):
        pytest.skip(f"FlopCounterMode counts no attention op here (it counted {sorted(profiled['flop_counter'])})")
    got = checks.check_attention_flops(profiled["trace"], profiled["flop_counter"])
    recorder.report("profile_bf16.attention_flops", got)


def test_profile_memory_peak_matches_torch(profiled: dict[str, Any], recorder: Recorder) -> None:
    # memory profiling's peak within 5% of torch.cuda.max_memory_allocated
    recorder.report("profile_bf16.memory_peak", checks.check_memory_peak(profiled["trace"], profiled["peak"]))


@pytest.fixture(scope="module")
def run_trace(tmp_path_factory: pytest.TempPathFactory, profiled: dict[str, Any], recorder: Recorder) -> Any:
    """The same training job as a script, profiled by ``kinetolens run``."""
    work = tmp_path_factory.mktemp("run")
    res = cli("run", "--logdir", str(work / "runs"), "--run", "run_bf16", "--steps", "2", "--warmup", "1",
              "--", sys.executable, "-c", RUN_SCRIPT, str(REPO), "8", cwd=work)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("trained")
    written = re.findall(r"^kinetolens: wrote (.+)$", res.stderr, flags=re.M)
    assert len(written) == 1, res.stderr[-3000:]
    path = Path(written[0])
    recorder.save("run_bf16", path, ["attribution", "tensor_cores", "gemm_flops"],
                  flop_counter=profiled["flop_counter"], config=SMALL.__dict__)  # fmt: skip
    return kinetolens.load(path, cache=False)


def test_run_attribution(run_trace: Any, recorder: Recorder) -> None:
    # `kinetolens run` on the bf16 transformer, same bars as kinetolens.profile
    recorder.report("run_bf16.attribution", checks.check_attribution(run_trace))


def test_run_tensor_cores(run_trace: Any, recorder: Recorder) -> None:
    # Tensor Cores under `kinetolens run`
    recorder.report("run_bf16.tensor_cores", checks.check_tensor_cores(run_trace))


def test_run_gemm_flops_equal_flop_counter(run_trace: Any, profiled: dict[str, Any], recorder: Recorder) -> None:
    # FLOPs depend on shapes only: the script's model has the profiled one's
    recorder.report("run_bf16.gemm_flops", checks.check_gemm_flops(run_trace, profiled["flop_counter"]))


def test_demo_on_cuda(tmp_path: Path, recorder: Recorder) -> None:
    # `kinetolens demo --device cuda` profiles on the GPU and shows its analysis
    res = cli("demo", "--device", "cuda", "--logdir", str(tmp_path), "--steps", "2", "--warmup", "1", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (line,) = [x for x in res.stdout.splitlines() if x.startswith("trace: ")]
    trace = kinetolens.load(line.removeprefix("trace: "), cache=False)
    assert trace.devices and torch.cuda.get_device_name(0) in {d.get("name") for d in trace.devices}
    # its summary names the GPU and its kernel time
    assert torch.cuda.get_device_name(0) in res.stdout and "kernel time" in res.stdout
    # The demo computes its loss outside its modules (as most scripts do):
    # no module bar here, the transformer tests above hold that one.
    shares = checks.attribution_shares(trace)
    assert shares["op"] >= checks.OP_SHARE, shares
    assert shares["backward_with_forward_op"] >= checks.BACKWARD_SHARE, shares
    recorder.report("demo", shares)
