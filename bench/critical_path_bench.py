#!/usr/bin/env python3
"""Critical path: kinetolens vs HolisticTraceAnalysis (HTA) 0.5.0, same trace and window.

Each measurement is a fresh process. The trace is loaded first (not
timed here; see ``load_bench.py``). Then the critical path of one window is
timed in CPU seconds (``time.process_time``, all threads) and wall seconds:

* kinetolens: ``critical_path(trace, annotation_window(trace, A, I))``,
  graph built, longest path, path table and summary; then the same call
  again in that process (the whole-trace tables are kept with the trace:
  what each later window of a trace costs);
* HTA: ``TraceAnalysis.critical_path_analysis(rank, A, I)`` with
  ``CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE=1`` (as HTA's tests), in
  ``bench/.venvs/hta`` (HTA 0.5.0, pandas < 3).

An empty annotation is the whole trace (HTA's rule; for kinetolens, every
CPU op and runtime call). HTA's whole-trace window differs from kinetolens'
window, so the graphs are not the same size there. Compare per node.

Usage::

    python3 bench/critical_path_bench.py                       # HTA's traces and df_index_resolver
    python3 bench/critical_path_bench.py --trace big.json --annotation ProfilerStep --instance 1 --no-hta
    python3 bench/critical_path_bench.py --trace big.json --annotation ProfilerStep --instance 1 -n 1 --timeout 780

``--timeout`` bounds each run, load included: a tool that does not finish
is reported as such instead of holding the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import REPO, TRACES, ensure_venv  # noqa: E402

VENVS = REPO / "bench" / ".venvs"
HTA_SPEC = ["HolisticTraceAnalysis==0.5.0", "pandas<3"]
PARAM = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
DEFAULT = [
    ("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", PARAM, 1),
    ("hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz", PARAM, 1),
    ("hta/critical_path/cuda_event_sync/event_sync_trace.json.gz", "ProfilerStep", 0),
    ("hta/df_index_resolver/df_index_resolver.json.gz", "ProfilerStep", 1),
    ("hta/df_index_resolver/df_index_resolver.json.gz", "", 0),
]

KINETOLENS_WORKER = r"""
import json, sys, time
import kinetolens
from kinetolens.analysis.paths.critical_path import annotation_window, critical_path, whole_window
path, ann, inst = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = kinetolens.load(path, cache=False)
w = annotation_window(t, ann, inst) if ann else whole_window(t)
c0, w0 = time.process_time(), time.perf_counter()
cp = critical_path(t, w)
c1, w1 = time.process_time(), time.perf_counter()
again = critical_path(t, w)
c2, w2 = time.process_time(), time.perf_counter()
assert again.length_us == cp.length_us
print(json.dumps({"cpu_s": c1 - c0, "wall_s": w1 - w0, "length_us": cp.length_us, "nodes": cp.nodes, "edges": cp.edges, "again_cpu_s": c2 - c1, "again_wall_s": w2 - w1}))
"""

HTA_WORKER = r"""
import json, logging, os, sys, tempfile, time
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
path, ann, inst = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = tempfile.mkdtemp()
os.symlink(os.path.abspath(path), os.path.join(d, os.path.basename(path)))
ta = TraceAnalysis(trace_dir=d)
rank = sorted(ta.t.traces)[0]
c0, w0 = time.process_time(), time.perf_counter()
g, ok = ta.critical_path_analysis(rank=rank, annotation=ann, instance_id=inst)
c1, w1 = time.process_time(), time.perf_counter()
nodes = g.critical_path_nodes
length = sum(g.edges[u, v]["weight"] for u, v in zip(nodes, nodes[1:]))
print(json.dumps({"cpu_s": c1 - c0, "wall_s": w1 - w0, "length_us": float(length), "nodes": g.number_of_nodes(), "edges": g.number_of_edges()}))
"""


def _run(python: str, code: str, trace: str, annotation: str, instance: int, env: dict, timeout: float) -> dict:
    try:
        out = subprocess.run([python, "-c", code, trace, annotation, str(instance)], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout:,.0f} s (load and critical path)"}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", help="one trace instead of the default list")
    ap.add_argument("--annotation", default="ProfilerStep")
    ap.add_argument("--instance", type=int, default=0)
    ap.add_argument("--no-hta", action="store_true", help="kinetolens only")
    ap.add_argument("-n", type=int, default=3, help="runs per tool and trace; the least CPU time is kept")
    ap.add_argument("--timeout", type=float, default=3600, help="wall seconds one run (load included) may take")
    args = ap.parse_args()
    cases = [(args.trace, args.annotation, args.instance)] if args.trace else [(str(TRACES / p), a, i) for p, a, i in DEFAULT]
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE="1")
    hta = None if args.no_hta else str(ensure_venv(VENVS / "hta", HTA_SPEC, sys.executable))
    print("| trace | window | tool | nodes | edges | length us | CPU s | wall s | HTA / kinetolens (CPU) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for trace, ann, inst in cases:
        results = {}
        runs_of = {}
        for tool, python, code in (("kinetolens", sys.executable, KINETOLENS_WORKER), ("HTA", hta, HTA_WORKER)):
            if python is None:
                continue
            runs = [_run(python, code, trace, ann, inst, env, args.timeout) for _ in range(args.n)]
            good = runs_of[tool] = [r for r in runs if "error" not in r]
            results[tool] = min(good, key=lambda r: r["cpu_s"]) if good else runs[0]
        ours = results["kinetolens"]
        for tool, r in results.items():
            window = (f"{ann} #{inst}" if ann else "whole trace").replace("|", "\\|")
            if "error" in r:
                print(f"| {Path(trace).name} | {window} | {tool} | error: {r['error']} |||||")
                continue
            ratio = f"{r['cpu_s'] / ours['cpu_s']:.1f}x" if tool == "HTA" and "cpu_s" in ours else ""
            print(
                f"| {Path(trace).name} | {window} | {tool} | {r['nodes']:,} | {r['edges']:,} | {r['length_us']:,.0f} | "
                f"{r['cpu_s']:.3f} | {r['wall_s']:.3f} | {ratio} |"
            )
            if "again_cpu_s" in r:
                again = min((x for x in runs_of[tool] if "again_cpu_s" in x), key=lambda x: x["again_cpu_s"])
                print(f"| | | kinetolens, same window again | | | | {again['again_cpu_s']:.3f} | {again['again_wall_s']:.3f} | |")


if __name__ == "__main__":
    main()
