"""A pipeline-parallel training job (torch.distributed.pipelining, gloo, CPU)
that profiles three steps of each rank.

    python tests/distributed/pipeline_job.py OUT_DIR SCHEDULE WORLD

``gpipe`` and ``1f1b`` run one stage per rank, each two 1024x1024 linear
layers; ``interleaved`` (Interleaved1F1B), ``izb`` (InterleavedZeroBubble)
and ``zbv`` (ZBVZeroBubble) two stages per rank, each two 512x512 layers
(ranks 0 and 1 of two: stages 0, 2 and 1, 3; ZBV's V: 0, 3 and 1, 2).  A step
runs 4 microbatches.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from profiled import profile_steps  # the sibling module (this file runs as a script)
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
    ScheduleZBVZeroBubble,
)

#: Microbatches per step and rows per microbatch.
MICROBATCHES, ROWS = 4, 256
MULTI_STAGE = {"interleaved": ScheduleInterleaved1F1B, "izb": ScheduleInterleavedZeroBubble, "zbv": ScheduleZBVZeroBubble}


def _loss(y: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return ((y - t) ** 2).mean()


def run_multi_stage(rank: int, world: int, out: str, sched: str, init: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    torch.manual_seed(0)
    n_stages = 2 * world
    ids = [rank, 2 * world - 1 - rank] if sched == "zbv" else [rank, rank + world]
    mods = [nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)) for _ in ids]
    stages = [PipelineStage(m, i, n_stages, torch.device("cpu")) for m, i in zip(mods, ids, strict=True)]
    schedule = MULTI_STAGE[sched](stages, n_microbatches=MICROBATCHES, loss_fn=_loss)
    x, tgt = torch.randn(ROWS * MICROBATCHES, 512), torch.randn(ROWS * MICROBATCHES, 512)
    opt = torch.optim.SGD([p for m in mods for p in m.parameters()], lr=0.01)

    def step() -> None:
        args = (x,) if 0 in ids else ()
        kwargs = {"target": tgt, "losses": []} if n_stages - 1 in ids else {}
        schedule.step(*args, **kwargs)
        opt.step()
        opt.zero_grad()

    profile_steps(out, rank, step, active=3)
    dist.destroy_process_group()


def run(rank: int, world: int, out: str, sched: str, init: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    torch.manual_seed(0)
    stage_mod = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
    micro, n_micro = ROWS, MICROBATCHES
    stage = PipelineStage(stage_mod, rank, world, torch.device("cpu"))

    schedule_class = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[sched]
    schedule = schedule_class(stage, n_microbatches=n_micro, loss_fn=_loss)
    x, tgt = torch.randn(micro * n_micro, 1024), torch.randn(micro * n_micro, 1024)
    opt = torch.optim.SGD(stage_mod.parameters(), lr=0.01)

    def step() -> None:
        if rank == 0:
            schedule.step(x)
        elif rank == world - 1:
            schedule.step(target=tgt, losses=[])
        else:
            schedule.step()
        opt.step()
        opt.zero_grad()

    profile_steps(out, rank, step, active=3)
    dist.destroy_process_group()


if __name__ == "__main__":
    out, sched, world = os.path.abspath(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    init = os.path.join(out, "init")  # the file:// rendezvous needs an absolute path
    os.makedirs(out, exist_ok=True)
    mp.spawn(run_multi_stage if sched in MULTI_STAGE else run, args=(world, out, sched, init), nprocs=world)
