#!/usr/bin/env python3
"""Working memory of each analysis a cold ``kinetolens summary`` runs.

On a big trace the summary's peak is the loaded model plus the largest
working memory of any one analysis (a sort, a join, a window function over
the model's tables), so each analysis is measured by itself: the trace is
loaded once, in a fresh process; then, for each analysis, after a pause that
lets the allocator return what the previous one freed, a thread samples the
process' resident size every millisecond while the analysis runs, and the
table shows the highest sample above the size at its start (MiB) and the
CPU seconds it took.  Analyses run in the order listed; results an analysis
keeps in the trace's session (the step breakdown, GPU metrics) are computed
by the first one that asks, so each row is that analysis' own work.

Usage::

    python3 bench/gen_trace.py --size-mb 512 -o bench/out/gen_500mb.json
    python3 bench/analysis_memory.py bench/out/gen_500mb.json [--src /tmp/old/src]

``--src`` measures another source tree (``git archive COMMIT src | tar -x -C
/tmp/old``): analyses missing there are shown as ``-``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, os, sys, threading, time
import psutil
import kinetolens
kinetolens.tune_allocator()  # as the `kinetolens` command does

proc = psutil.Process()
rss = lambda: proc.memory_info().rss
trace = kinetolens.load(sys.argv[1], cache=False)
peak = [0]
running = [False]

def sample():
    while True:
        if running[0]:
            peak[0] = max(peak[0], rss())
        time.sleep(0.001)

threading.Thread(target=sample, daemon=True).start()

#: Each analysis: its module and function, called with the trace.
CALLS = {
    "step_breakdown": ("kinetolens.analysis.gputime.overview", "step_breakdown"),
    "gpu_metrics": ("kinetolens.analysis.hardware.gpu_metrics", "gpu_metrics"),
    "idle_gaps": ("kinetolens.analysis.gputime.idle", "idle_gaps"),
    "attribution": ("kinetolens.analysis.summary", "attribution"),
    "unrecorded_launches": ("kinetolens.analysis.summary", "unrecorded_launches"),
    "memory_events": ("kinetolens.analysis.memory.usage", "memory_events"),
    "summary": ("kinetolens.analysis.summary", "summarize"),
}

def call(name):
    import importlib
    module, function = CALLS[name]
    return getattr(importlib.import_module(module), function)(trace)

def memory_peaks():
    from kinetolens.analysis.memory.usage import memory_events, memory_peaks
    events = memory_events(trace)
    time.sleep(0.4)
    start_measure()
    return memory_peaks(events)

def start_measure():
    peak[0] = rss()
    base[0] = peak[0]

base = [0]
out = {}
for name in sys.argv[2].split(","):
    fn = memory_peaks if name == "memory_peaks" else (lambda name=name: call(name))
    time.sleep(0.4)
    start_measure()
    running[0] = True
    cpu = time.process_time()
    try:
        fn()
    except (ImportError, AttributeError):
        out[name] = None
        running[0] = False
        continue
    running[0] = False
    out[name] = {"mib": (peak[0] - base[0]) / 2**20, "cpu_s": time.process_time() - cpu}
print(json.dumps(out))
"""

ANALYSES = ["step_breakdown", "gpu_metrics", "idle_gaps", "attribution", "unrecorded_launches", "memory_events", "memory_peaks", "summary"]


def measure(trace: str, src: Path) -> dict[str, dict[str, float] | None]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", WORKER, trace, ",".join(ANALYSES)], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"analysis_memory: the worker failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--src", default=str(ROOT / "src"), help="the kinetolens source tree to measure")
    args = ap.parse_args()
    result = measure(args.trace, Path(args.src))
    print(f"| analysis ({Path(args.trace).name}) | working memory (MiB) | CPU s |")
    print("|---|---:|---:|")
    for name in ANALYSES:
        r = result.get(name)
        mib = "-" if r is None else f"{r['mib']:.0f}"
        cpu = "-" if r is None else f"{r['cpu_s']:.2f}"
        print(f"| {name} | {mib} | {cpu} |")


if __name__ == "__main__":
    main()
