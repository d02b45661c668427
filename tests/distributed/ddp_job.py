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

``--delay-ms D --slow-rank R`` trains from a ``DataLoader`` instead, whose
batches take D ms longer to load on rank R (a planted straggler), on a model
of several layers whose gradients DDP splits into buckets of ``--bucket-kb``
(several all-reduces per step, in flight together on gloo's two threads).
``--cut-last-step`` makes every rank exit in the middle of its last step,
after the gradient all-reduces, while it is being profiled: the traces end
with a step cut short (spawn mode then records three steps, the last cut).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Slowdown:
    """A planted straggler: ``rank`` loads each batch ``delay_ms`` later."""

    rank: int
    delay_ms: float
    bucket_kb: float = 4.0
    cut_last_step: bool = False


class SlowBatches(torch.utils.data.Dataset):
    """Random batches of ``WIDE`` features; slow to load on the slow rank."""

    def __init__(self, steps: int, delay_s: float) -> None:
        self.steps, self.delay_s = steps, delay_s

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.delay_s:
            time.sleep(self.delay_s)
        return torch.randn(4, WIDE)


#: Features of the slow-loading job's model: four WIDE x WIDE layers of
#: (WIDE + 1) * WIDE * 4 bytes = 4.2 kB of gradients each.
WIDE = 32


def _batches(steps: int, slow: Slowdown | None) -> Iterable[torch.Tensor]:
    if slow is None:
        return (torch.randn(4, 8) for _ in range(steps))
    delay = slow.delay_ms / 1e3 if dist.get_rank() == slow.rank else 0.0
    # batch_size=None: each item is a batch, loaded in this process.
    return torch.utils.data.DataLoader(SlowBatches(steps, delay), batch_size=None)


def train(steps: int, on_step: Callable[[], None] | None = None, slow: Slowdown | None = None) -> None:
    """DDP training on the already initialized default process group."""
    torch.manual_seed(0)
    if slow is None:
        model = torch.nn.parallel.DistributedDataParallel(build_model())
    else:
        layers = [torch.nn.Linear(WIDE, WIDE) for _ in range(4)]
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Sequential(*layers), bucket_cap_mb=slow.bucket_kb / 1024
        )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for i, batch in enumerate(_batches(steps, slow)):
        loss = model(batch).square().mean()
        loss.backward()
        if slow is not None and slow.cut_last_step and i == steps - 1:
            sys.exit(0)  # inside the profiling window, mid-step
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


def _spawned_rank(
    rank: int, world_size: int, init_file: str, logdir: str, run: str, slow: Slowdown | None
) -> None:
    import kinetolens

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    cut = slow is not None and slow.cut_last_step
    schedule = {**SPAWN_SCHEDULE, "steps": SPAWN_SCHEDULE["steps"] + 1} if cut else SPAWN_SCHEDULE
    try:
        with kinetolens.profile(logdir=logdir, run=run, **schedule) as prof:
            train(SPAWN_STEPS + cut, prof.step, slow)
    finally:
        shut_down()


def spawn(world_size: int, logdir: str, run: str, slow: Slowdown | None = None) -> None:
    """Start ``world_size`` ranks in fresh interpreters and wait for them."""
    with tempfile.TemporaryDirectory(prefix="kinetolens-rdzv-") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        mp.spawn(_spawned_rank, args=(world_size, init_file, logdir, run, slow), nprocs=world_size, join=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawn", type=int, metavar="N", help="spawn N ranks that profile themselves")
    parser.add_argument("--logdir", default="./kinetolens-runs")
    parser.add_argument("--run", default=Path(__file__).stem)
    parser.add_argument("--delay-ms", type=float, help="load each batch this much later on --slow-rank")
    parser.add_argument("--slow-rank", type=int, default=1)
    parser.add_argument("--bucket-kb", type=float, default=4.0, help="DDP bucket size with --delay-ms")
    parser.add_argument("--cut-last-step", action="store_true", help="with --delay-ms: exit mid-step at the end")
    args = parser.parse_args(argv)
    slow = (
        Slowdown(args.slow_rank, args.delay_ms, args.bucket_kb, args.cut_last_step)
        if args.delay_ms is not None
        else None
    )
    if args.spawn:
        spawn(args.spawn, args.logdir, args.run, slow)
        return
    dist.init_process_group("gloo")  # torchrun's environment
    try:
        train(TORCHRUN_STEPS, slow=slow)
    finally:
        shut_down()


if __name__ == "__main__":
    main()
