"""Two NCCL ranks on the one GPU of the machine, each profiling itself:
``python nccl_job.py LOGDIR``.  A DDP step of a small model, then an
all-reduce, per step; three steps, two recorded."""

from __future__ import annotations

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _rank(rank: int, init_file: str, logdir: str) -> None:
    import kinetolens

    torch.cuda.set_device(0)  # both ranks: the machine has one GPU
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1024, 1024).cuda())
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        with kinetolens.profile(logdir=logdir, run="nccl", steps=2, warmup=1) as prof:
            for _ in range(3):
                loss = model(torch.randn(64, 1024, device="cuda")).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                prof.step()
        torch.cuda.synchronize()
    finally:
        dist.destroy_process_group()


def main(logdir: str) -> None:
    os.environ.setdefault("NCCL_P2P_DISABLE", "1")  # one device: nothing to map peer to peer
    with tempfile.TemporaryDirectory(prefix="kinetolens-nccl-") as tmp:
        mp.spawn(_rank, args=(os.path.join(tmp, "rendezvous"), logdir), nprocs=2, join=True)


if __name__ == "__main__":
    main(sys.argv[1])
