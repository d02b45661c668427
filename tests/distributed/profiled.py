"""One rank of a test job profiling its steps the way torch users do
(``tensorboard_trace_handler``, one trace per rank named ``rank<N>``)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def profile_steps(out: str, rank: int, step: Callable[[], None], active: int, record_shapes: bool = False) -> None:
    """One step outside the profiler (first-call setup), one warm-up step, ``active`` recorded ones."""
    step()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        record_shapes=record_shapes,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=active),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(out, worker_name=f"rank{rank}"),
    ) as prof:
        for _ in range(active + 1):
            step()
            prof.step()
