"""Advice on an inference trace: per engine iteration, and only what a server can change.

The recommendation rules (:mod:`kinetolens.analysis.advice.recommendations`) are
written for a training loop: their figures are per step and some of their
changes (DataLoader workers, foreach optimizers, GradScaler, gradient
bucketing) mean nothing to a model being served.  On an inference trace:

* the unit is the engine iteration (:func:`kinetolens.analysis.inference.phases.iterations`)
  where the trace has them: the rules read the iterations' breakdown and
  windows as they read steps', so every figure is per iteration, and their
  words say so;
* rules about training only are not run (registered ``training_only``: no
  DataLoader feeds an engine; nn.DataParallel's advice is about gradients;
  an engine fills the memory its weights leave with KV cache on purpose,
  vLLM's gpu_memory_utilization is 0.9 by default, so a peak near capacity
  is its design);
* rules whose change names training tools get the serving counterpart (:data:`CHANGES`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import polars as pl

from kinetolens.analysis.gputime.overview import COLUMNS

#: The change a finding (by ``rule``) advises on an inference trace, where its
#: training wording names tools a server does not use.
CHANGES = {
    "launch_overhead": (
        "Replay the forward from CUDA/HIP graphs instead of launching each kernel (the engine's graph mode: "
        "vLLM without enforce_eager, SGLang without --disable-cuda-graph; torch.compile mode='reduce-overhead'), "
        "and fuse elementwise chains (torch.compile)"
    ),
    "host_bound": (
        "Cut host overhead per iteration: replay the forward from CUDA/HIP graphs (the engine's graph mode, "
        "torch.compile mode='reduce-overhead'), fuse ops (torch.compile), or batch more requests per iteration "
        "so each launch does more work"
    ),
    "synchronization": (
        "Keep values on the GPU until the host needs them: no .item()/.cpu()/.tolist() inside the forward, "
        "non_blocking=True copies to pinned memory, and let the host schedule the next iteration while the "
        "GPU runs this one (asynchronous scheduling, where the engine offers it)"
    ),
    "fp32_tensor_cores": (
        "Serve the model in bf16/fp16 (the engine's dtype='bfloat16', or model.to(torch.bfloat16)), or with "
        "fp8 weights where the engine supports them"
    ),
    "exposed_communication": (
        "Overlap the tensor- or expert-parallel collectives with compute (the engine's custom or fused "
        "all-reduce, async ops waited on as late as possible), or split the model over fewer GPUs where it fits"
    ),
}

_STEP = re.compile(r"\b([Ss])teps?\b")


def iteration_steps(its: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The iterations as the rules read steps: their breakdown (``step`` and
    nanoseconds per category, as :func:`~kinetolens.analysis.gputime.overview.step_breakdown`)
    and windows (``step, start, end``, as :func:`~kinetolens.analysis.gputime.overview.step_windows`)."""
    step = pl.col("iteration").alias("step")
    return its.select(step, *COLUMNS), its.select(step, "start", "end")


def _iterations(text: str) -> str:
    """``step`` -> ``iteration`` (``steps`` -> ``iterations``, capitals kept)."""
    return _STEP.sub(lambda m: ("I" if m[1] == "S" else "i") + "teration" + ("s" if m[0].endswith("s") else ""), text)


def served(found: list[Any], *, per_iteration: bool) -> list[Any]:
    """``found`` (findings) worded for a served model: the serving change where
    :data:`CHANGES` has one, and, ``per_iteration``, per iteration instead of per step."""
    out = []
    for f in found:
        # A step already replayed from a graph keeps its own change (no "replay from graphs").
        change = f.change if f.where.get("graph_replayed") else CHANGES.get(f.rule, f.change)
        if per_iteration:
            f = dataclasses.replace(
                f, title=_iterations(f.title), evidence=_iterations(f.evidence), estimate=_iterations(f.estimate),
                change=_iterations(change), per="iteration",
            )  # fmt: skip
        else:
            f = dataclasses.replace(f, change=change)
        out.append(f)
    return out
