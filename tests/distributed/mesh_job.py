"""A 2 x 2 DeviceMesh job (data x tensor parallel) on gloo, CPU: FSDP2 shards
an MLP over the ``dp`` dimension, tensor parallelism splits its two linear
layers over ``tp``; each step first exchanges its input rows among the ``tp``
pair with an all-to-all, as a mixture-of-experts layer dispatches tokens to
its experts; two steps of each rank are profiled.

    python tests/distributed/mesh_job.py OUT_DIR

Gloo records no process group per call (no ``record_param_comms``):
``distributedInfo`` lists the groups (``default_pg``, ``mesh_dp``,
``mesh_tp``), and kinetolens must place each call on evidence.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from profiled import profile_steps  # the sibling module (this file runs as a script)

WORLD = 4


def run(rank: int, out: str, init: str) -> None:
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=WORLD)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)

    experts = mesh["tp"].get_group()

    def step() -> None:
        dispatched = torch.empty_like(x)
        dist.all_to_all_single(dispatched, x, group=experts)  # tokens to the experts of the pair
        model(dispatched).sum().backward()
        opt.step()
        opt.zero_grad()

    profile_steps(out, rank, step, active=2, record_shapes=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    out = os.path.abspath(sys.argv[1])  # the file:// rendezvous needs an absolute path
    os.makedirs(out, exist_ok=True)
    mp.spawn(run, args=(out, os.path.join(out, "init")), nprocs=WORLD)
