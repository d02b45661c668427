"""A CPU training job whose process exits inside the profiling window, mid-step.

One rank on gloo (a file rendezvous, no ports).  Every step all-reduces each
of the ten layers' gradients; in the last step the process calls
``sys.exit`` after 8 of the 10 all-reduces, so the profiler stops inside it
and the trace ends with a step cut short, as when a job finishes or crashes
while it is being profiled.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch
import torch.distributed as dist

import kinetolens

LAYERS = 10
WHOLE_STEPS = 4  # recorded steps that run to the end
CUT_AFTER = 8  # all-reduces the last step gets through before the exit


def main(logdir: str) -> None:
    with tempfile.TemporaryDirectory(prefix="kinetolens-rdzv-") as tmp:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 'rdzv')}", rank=0, world_size=1)
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(64, 64, bias=False) for _ in range(LAYERS)])
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        # warmup=1: the first step is not recorded; then WHOLE_STEPS whole ones and the cut one.
        with kinetolens.profile(logdir=logdir, run="cut", warmup=1) as prof:
            for step in range(WHOLE_STEPS + 2):
                loss = model(torch.randn(32, 64)).square().mean()
                loss.backward()
                for i, p in enumerate(model.parameters()):
                    if step == WHOLE_STEPS + 1 and i == CUT_AFTER:
                        sys.exit(0)  # the process ends inside the profiling window
                    dist.all_reduce(p.grad)
                opt.step()
                opt.zero_grad()
                prof.step()


if __name__ == "__main__":
    main(sys.argv[1])
