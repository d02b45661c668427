"""A two-stage pipeline-parallel training job (torch.distributed.pipelining,
gloo, CPU) that profiles three steps of each stage.

    python tests/distributed/pipeline_job.py OUT_DIR gpipe|1f1b WORLD

Each stage is two 1024x1024 linear layers; a step runs 4 microbatches of 256.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

#: Microbatches per step and rows per microbatch.
MICROBATCHES, ROWS = 4, 256


def run(rank: int, world: int, out: str, sched: str, init: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    torch.manual_seed(0)
    stage_mod = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
    micro, n_micro = ROWS, MICROBATCHES
    stage = PipelineStage(stage_mod, rank, world, torch.device("cpu"))

    def loss_fn(y: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return ((y - t) ** 2).mean()

    schedule_class = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[sched]
    schedule = schedule_class(stage, n_microbatches=n_micro, loss_fn=loss_fn)
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

    step()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=3),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(out, worker_name=f"rank{rank}"),
    ) as prof:
        for _ in range(4):
            step()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    out, sched, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
    init = os.path.join(out, "init")
    os.makedirs(out, exist_ok=True)
    mp.spawn(run, args=(world, out, sched, init), nprocs=world)
