"""One training step of the GPU suite's tiny transformer, for Nsight Compute.

Two warm-up steps, then one step between ``cudaProfilerStart`` and
``cudaProfilerStop`` (``ncu --profile-from-start off`` profiles exactly its
kernels), optionally under ``kinetolens.profile`` (``--trace DIR``) or
``torch.autograd.profiler.emit_nvtx`` (``--emit-nvtx``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from tests.gpu.models import TINY, Trainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", type=Path, help="profile the step with kinetolens.profile into this logdir")
    ap.add_argument("--emit-nvtx", action="store_true", help="mark each op with an NVTX range")
    args = ap.parse_args()
    trainer = Trainer(TINY, "cuda")
    for _ in range(2):
        trainer.step()
    trainer.sync()
    ctx: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if args.trace is not None:
        import kinetolens

        ctx = kinetolens.profile(logdir=args.trace, run="ncu_step", with_stack=False)
    elif args.emit_nvtx:
        ctx = torch.autograd.profiler.emit_nvtx(record_shapes=True)
    with ctx:
        torch.cuda.profiler.start()
        trainer.step()
        trainer.sync()
        torch.cuda.profiler.stop()
    print("ncu_step: done", file=sys.stderr)


if __name__ == "__main__":
    main()
