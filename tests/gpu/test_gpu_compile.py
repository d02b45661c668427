"""A torch.compile'd bf16 transformer on the GPU: inductor's Triton kernels,
named after the ops fused into them (the ``fused_ops`` column of
``kinetolens kernels``, ``kinetolens compiled``), attributed like eager
kernels."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

import kinetolens
from tests.gpu import checks
from tests.gpu.models import SMALL, Trainer
from tests.gpu.record import Recorder
from tests.gpu.test_gpu_training import cli


def test_compiled_model_triton_kernels(tmp_path: Path, recorder: Recorder) -> None:
    # a torch.compile'd model's Triton kernels, named by their fused ops, get op and module
    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        pytest.fail(f"torch.compile is not supported here (torch {torch.__version__})")
    trainer = Trainer(SMALL, "cuda", compiled=True)
    # Compiled in the first (skipped) step, under kinetolens.profile: it
    # records what inductor fused into each kernel (`kinetolens compiled`).
    with kinetolens.profile(logdir=tmp_path, run="compiled_bf16", skip=1, steps=2, warmup=1) as prof:
        for _ in range(4):
            trainer.step()
            prof.step()
    trainer.sync()
    (path,) = prof.trace_files
    recorder.save("compiled_bf16", path, ["compiled"], provenance="inductor", config=SMALL.__dict__)
    got = checks.check_compiled(kinetolens.load(path, cache=False), "inductor")
    res = cli("compiled", str(path), "--no-cache", "-w", "120", cwd=tmp_path)
    assert res.returncode == 0 and "triton_" in res.stdout, (res.stdout[-2000:], res.stderr[-2000:])
    recorder.report("compiled_bf16", got)
