"""Profiling overhead of kinetolens.profile against bare torch.profiler.

What is measured: the wall time of one training step of the demo model
(``kinetolens demo``'s CNN + transformer, AdamW, batch 16, on the CPU or,
with ``--device cuda``, on the GPU, synchronized after each step) while
recording, in three configurations that run in the same process, on the
same model, interleaved repetition by repetition (the order rotates, so no
configuration always runs first or last):

* ``none``: no profiler;
* ``torch``: bare ``torch.profiler.profile`` with the options and schedule
  kinetolens uses (CPU [+ CUDA], record_shapes, with_stack, with_modules,
  profile_memory; warmup W, active A) and
  ``torch.profiler.tensorboard_trace_handler`` to write the trace;
* ``kinetolens``: ``kinetolens.profile(steps=A, warmup=W)``, which also
  writes each op's exact call line into the trace at export
  (``kinetolens.capture.call_sites``; timed on its own as "call sites").

A repetition runs W warmup + A recorded steps.  The steps timed are the
recorded ones except the last: the last one's ``prof.step()`` closes the
window and writes the trace, which is export time, reported separately, not
step time.  Each repetition's figure is the median of its timed steps; the
table shows the median over repetitions and, for the ratio, the median of
the per-repetition ratios kinetolens/torch (interleaving pairs them in time,
so machine noise cancels better than in a ratio of medians).

``--clock cpu`` times steps in the main thread's CPU seconds instead of wall
seconds, with torch on one intra-op thread (so that thread does all of a
step's work): on a machine shared with other jobs, waiting for a core is not
counted, so the ratio stays meaningful where wall times swing by 10x.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

MODES = ("none", "torch", "kinetolens")
TARGET = 1.03  # kinetolens at most 3% over bare torch.profiler (issue target, exact call lines included)


def make_job(device: str) -> tuple[Callable[[], None], Any]:
    """A demo-model training step (closure) on ``device``."""
    import torch
    from torch.nn import functional as F

    from kinetolens.capture.demo_model import build_model

    torch.manual_seed(0)
    model = build_model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    images = torch.randn(16, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (16,), device=device)

    def train_step() -> None:
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()

    return train_step, torch


#: The clock steps are timed with (``--clock``).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = CLOCKS["wall"]


def cuda_missing() -> str | None:
    """Why ``--device cuda`` cannot run here, or None (one line, before any work)."""
    import torch

    if not torch.backends.cuda.is_built():
        return f"this torch build ({torch.__version__}) has no CUDA support"
    if not torch.cuda.is_available():
        return "no CUDA device is available"
    return None


def timed_steps(train_step: Callable[[], None], step: Callable[[], None] | None, n: int) -> list[float]:
    """Seconds (``clock``) of ``n`` steps, each including the profiler's step()."""
    times = []
    for _ in range(n):
        t0 = clock()
        train_step()
        if step is not None:
            step()
        times.append(clock() - t0)
    return times


def run_once(mode: str, train_step: Callable[[], None], torch: Any, warmup: int, active: int, tmp: Path) -> dict[str, float]:
    """One repetition of one configuration: median timed step and export."""
    n = warmup + active
    if mode == "none":
        times = timed_steps(train_step, None, n)
        return {"step_s": statistics.median(times[warmup : n - 1]), "export_s": 0.0}
    if mode == "torch":
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        ctx = profile(
            activities=acts,
            schedule=schedule(wait=0, warmup=warmup, active=active, repeat=1),
            on_trace_ready=tensorboard_trace_handler(str(tmp / "torch")),
            record_shapes=True,
            with_stack=True,
            with_modules=True,
            profile_memory=True,
        )
    else:
        import kinetolens

        ctx = kinetolens.profile(logdir=tmp, run="kinetolens", steps=active, warmup=warmup)
    with _call_sites_timer() as call_sites_s:
        with ctx as prof:
            times = timed_steps(train_step, prof.step, n)
    # the last recorded step's prof.step() wrote the trace
    last = times[n - 1]
    typical = statistics.median(times[warmup : n - 1])
    return {"step_s": typical, "export_s": max(last - typical, 0.0), "call_sites_s": sum(call_sites_s)}


@contextlib.contextmanager
def _call_sites_timer() -> Iterator[list[float]]:
    """Seconds spent writing call lines into traces (part of export)."""
    from kinetolens.capture import call_sites

    spent: list[float] = []
    write = call_sites.write_call_stacks

    def timed(*args: Any) -> None:
        t0 = time.perf_counter()
        write(*args)
        spent.append(time.perf_counter() - t0)

    call_sites.write_call_stacks = timed  # type: ignore[assignment]
    try:
        yield spent
    finally:
        call_sites.write_call_stacks = write  # type: ignore[assignment]


def bench(reps: int, warmup: int, active: int, device: str) -> dict[str, Any]:
    train_step, torch = make_job(device)
    if clock is time.thread_time:
        torch.set_num_threads(1)
    for _ in range(3):  # allocator, autograd and optimizer state warm
        train_step()
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="kinetolens-bench-") as tmp:
        for rep in range(reps):
            order = MODES[rep % 3 :] + MODES[: rep % 3]
            for mode in order:
                runs[mode].append(run_once(mode, train_step, torch, warmup, active, Path(tmp) / f"{rep}"))
            print(f"rep {rep + 1}/{reps}: " + ", ".join(f"{m} {runs[m][-1]['step_s'] * 1e3:.1f} ms" for m in MODES),
                  file=sys.stderr)  # fmt: skip
    return {"runs": runs, "torch_version": str(torch.__version__), "device": device}


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    runs = result["runs"]
    med = {m: statistics.median(r["step_s"] for r in runs[m]) for m in MODES}
    span = {m: (min(r["step_s"] for r in runs[m]), max(r["step_s"] for r in runs[m])) for m in MODES}
    export = {m: statistics.median(r["export_s"] for r in runs[m]) for m in MODES}
    call_sites = statistics.median(r.get("call_sites_s", 0.0) for r in runs["kinetolens"])
    ratios = [k["step_s"] / t["step_s"] for k, t in zip(runs["kinetolens"], runs["torch"])]
    over_none = [t["step_s"] / n["step_s"] for t, n in zip(runs["torch"], runs["none"])]
    return {
        "median_step_s": med,
        "range_step_s": span,
        "median_export_s": export,
        "median_call_sites_s": call_sites,
        "kinetolens_over_torch": statistics.median(ratios),
        "kinetolens_over_torch_range": (min(ratios), max(ratios)),
        "torch_over_none": statistics.median(over_none),
    }


def markdown(result: dict[str, Any], summary: dict[str, Any], command: str, reps: int, warmup: int, active: int) -> str:
    med, span, export = summary["median_step_s"], summary["range_step_s"], summary["median_export_s"]
    label = {
        "none": "no profiler",
        "torch": "bare `torch.profiler` (same options)",
        "kinetolens": "`kinetolens.profile`",
    }
    lines = [
        f"Command: `{command}`",
        "",
        f"torch {result['torch_version']}, device {result['device']}, Python {platform.python_version()}; "
        f"{reps} repetitions x ({warmup} warmup + {active} recorded steps), {active - 1} steps timed per repetition "
        f"({'main-thread CPU time, torch on 1 thread' if clock is time.thread_time else 'wall time'}).",
        "",
        "| configuration | median step ms (min–max over reps) | vs no profiler | median trace export ms |",
        "|---|---:|---:|---:|",
    ]
    for m in MODES:
        lo, hi = span[m]
        exp = "—" if m == "none" else f"{export[m] * 1e3:.0f}"
        lines.append(
            f"| {label[m]} | {med[m] * 1e3:.1f} ({lo * 1e3:.1f}–{hi * 1e3:.1f}) | {med[m] / med['none']:.2f}x | {exp} |"
        )
    ratio = summary["kinetolens_over_torch"]
    lo, hi = summary["kinetolens_over_torch_range"]
    verdict = "met" if ratio <= TARGET else "NOT met"
    lines += [
        "",
        f"- kinetolens / bare torch.profiler step time: **{ratio:.3f}** (median of per-repetition ratios; "
        f"range {lo:.3f}–{hi:.3f}) → at most {TARGET:.2f}: {verdict}",
        f"- of kinetolens' export, writing the ops' call lines (call sites): "
        f"{summary['median_call_sites_s'] * 1e3:.0f} ms (median)",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="kinetolens.profile overhead vs bare torch.profiler")
    parser.add_argument("-n", "--reps", type=int, default=7, help="interleaved repetitions (default 7)")
    parser.add_argument("--warmup", type=int, default=2, help="warmup steps per repetition (default 2)")
    parser.add_argument("--steps", type=int, default=8, help="recorded steps per repetition (default 8)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--clock", default="wall", choices=sorted(CLOCKS),
                        help="time steps in wall seconds (default) or main-thread CPU seconds (a loaded machine)")
    parser.add_argument("--json", type=Path, help="also write raw per-repetition numbers here")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the last recorded step is export)")
    global clock
    clock = CLOCKS[args.clock]
    if args.device == "cuda" and (why := cuda_missing()):
        print(f"capture_overhead: --device cuda: {why}", file=sys.stderr)
        return 2
    command = "python " + " ".join(["bench/capture_overhead.py", *(argv if argv is not None else sys.argv[1:])])
    result = bench(args.reps, args.warmup, args.steps, args.device)
    summary = summarize(result)
    print(markdown(result, summary, command, args.reps, args.warmup, args.steps))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**result, "summary": summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
