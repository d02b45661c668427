"""A torch.compile'd bf16 transformer on the GPU: inductor's Triton kernels,
named after the ops fused into them, attributed like eager kernels.
(issue 21, the suite)"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

import kinetolens
from tests.gpu import checks
from tests.gpu.models import SMALL, Trainer
from tests.gpu.record import Recorder


def test_compiled_model_triton_kernels(tmp_path: Path, recorder: Recorder) -> None:
    # issue 21: a torch.compile'd model's Triton kernels, named by their fused ops, get op and module
    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        pytest.fail(f"torch.compile is not supported here (torch {torch.__version__})")
    trainer = Trainer(SMALL, "cuda", compiled=True)
    for _ in range(3):  # compiles forward and backward
        trainer.step()
    trainer.sync()
    with kinetolens.profile(logdir=tmp_path, run="compiled_bf16", steps=2, warmup=1) as prof:
        for _ in range(3):
            trainer.step()
            prof.step()
    trainer.sync()
    (path,) = prof.trace_files
    recorder.save("compiled_bf16", path, ["compiled"], config=SMALL.__dict__)
    recorder.report("compiled_bf16", checks.check_compiled(kinetolens.load(path, cache=False)))
