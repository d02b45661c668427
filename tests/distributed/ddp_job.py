"""A tiny DDP training job on gloo and CPU, profiled by kinetolens.

Two ways to start it, the two ways users profile distributed jobs:

* ``kinetolens run -- torchrun --standalone --nproc_per_node N ddp_job.py``:
  unmodified code, profiled from the optimizer's steps (zero-code capture);
* ``python ddp_job.py --spawn N --logdir DIR``: ``torch.multiprocessing``
  spawns N ranks that rendezvous through a file (no ports to race for) and
  profile themselves with the ``kinetolens.profile`` context manager.

Each step runs DDP's gradient all-reduce (one bucket: every parameter) and
an explicit all-reduce of the loss, as training loops do for logging, so each
trace holds two kinds of collective.  The model is tiny and the step count
small so that four ranks fit in seconds on a two-core machine.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# Steps driven in each mode.  torchrun mode: profiling starts after the second
# optimizer step, then warmup 1 + 2 recorded steps.  spawn mode: the profile's
# own schedule, skip 1 + warmup 1 + 2 recorded steps.
TORCHRUN_STEPS = 6
SPAWN_STEPS = 4
SPAWN_SCHEDULE = {"skip": 1, "warmup": 1, "steps": 2}


def build_model() -> torch.nn.Module:
    """Two linear layers: 8*16+16 + 16*4+4 = 212 gradient elements."""
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def train(steps: int, on_step: Callable[[], None] | None = None) -> None:
    """DDP training on the already initialized default process group."""
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(build_model())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(steps):
        loss = model(torch.randn(4, 8)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        if on_step is not None:
            on_step()


def shut_down() -> None:
    """Free the DDP model, then the process group.

    A DDP module still alive at interpreter exit is destroyed after its
    process group; with gloo that aborts the process ("terminate called
    without an active exception") in a good share of runs on this torch.
    DDP holds reference cycles, so returning from :func:`train` alone does
    not free it: collect first.
    """
    gc.collect()
    dist.destroy_process_group()


def _spawned_rank(rank: int, world_size: int, init_file: str, logdir: str, run: str) -> None:
    import kinetolens

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        with kinetolens.profile(logdir=logdir, run=run, **SPAWN_SCHEDULE) as prof:
            train(SPAWN_STEPS, prof.step)
    finally:
        shut_down()


def spawn(world_size: int, logdir: str, run: str) -> None:
    """Start ``world_size`` ranks in fresh interpreters and wait for them."""
    with tempfile.TemporaryDirectory(prefix="kinetolens-rdzv-") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        mp.spawn(_spawned_rank, args=(world_size, init_file, logdir, run), nprocs=world_size, join=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawn", type=int, metavar="N", help="spawn N ranks that profile themselves")
    parser.add_argument("--logdir", default="./kinetolens-runs")
    parser.add_argument("--run", default=Path(__file__).stem)
    args = parser.parse_args(argv)
    if args.spawn:
        spawn(args.spawn, args.logdir, args.run)
        return
    dist.init_process_group("gloo")  # torchrun's environment
    try:
        train(TORCHRUN_STEPS)
    finally:
        shut_down()


if __name__ == "__main__":
    main()
