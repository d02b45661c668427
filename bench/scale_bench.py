#!/usr/bin/env python3
"""How load time and memory grow with trace size (0.25 to 2 GB).

For each size the script builds a trace with ``bench/gen_trace.py`` (the
steps of a real trace repeated with fresh ids; built once and kept under
``bench/out/``), then, in a fresh process per run, times
``kinetolens.load(path, cache=False)`` followed by ``summarize`` (the
attribution a user sees first), and reads the process' peak RSS.

Reported per size: wall seconds, CPU seconds of the process (user + system,
all threads), MB of JSON per CPU second (throughput per core: the machine is
shared, and CPU time is what a busy neighbour disturbs least), peak RSS and
peak RSS per MB of JSON.  Growth is linear when the per-MB columns stay flat.

Usage::

    python3 bench/scale_bench.py                    # 250, 500, 1000, 2000 MB
    python3 bench/scale_bench.py --sizes 250,500 --write
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from bench_common import DOC, REPO

OUT = REPO / "bench" / "out"
MARK_START = "<!-- scale-bench:start -->"
MARK_END = "<!-- scale-bench:end -->"
MB = 1e6
MIB = 1024 * 1024
TARGET_PEAK_2GB = 4 * 1024**3
TARGET_MB_PER_CPU_S = 60.0

WORKER = r"""
import json, os, resource, sys, time
import kinetolens
kinetolens.tune_allocator()  # as the `kinetolens` command does
from kinetolens.analysis.summary import summarize
path = sys.argv[1]
t0 = time.perf_counter(); c0 = os.times()
trace = kinetolens.load(path, cache=False)
t1 = time.perf_counter()
summary = summarize(trace)
t2 = time.perf_counter(); c2 = os.times()
print(json.dumps({
    "load_s": t1 - t0,
    "total_s": t2 - t0,
    "cpu_s": (c2.user - c0.user) + (c2.system - c0.system),
    "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "ops": trace.ops.height,
    "kernels": trace.kernels.height,
    "op_attributed": summary.attribution.op,
}))
"""


def ensure_trace(size_mb: int) -> Path:
    path = OUT / f"gen_{size_mb}mb.json"
    if not path.exists():
        subprocess.run(
            [sys.executable, str(REPO / "bench" / "gen_trace.py"), "--size-mb", str(size_mb), "-o", str(path)],
            check=True,
        )
    return path


def measure(path: Path, repeat: int) -> dict[str, float]:
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", WORKER, str(path)], check=True, capture_output=True, text=True)
        runs.append(json.loads(out.stdout))
    best = min(runs, key=lambda r: r["cpu_s"])
    best["peak_rss"] = max(r["peak_rss"] for r in runs)
    best["json_bytes"] = path.stat().st_size
    return best


def table(rows: list[dict[str, float]]) -> str:
    lines = [
        "| JSON MB | ops | kernels | wall s | CPU s | MB / CPU s | peak RSS MiB | peak / JSON |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        mb = r["json_bytes"] / MB
        lines.append(
            f"| {mb:.0f} | {r['ops']:,} | {r['kernels']:,} | {r['total_s']:.1f} | {r['cpu_s']:.1f} | "
            f"{mb / r['cpu_s']:.0f} | {r['peak_rss'] / MIB:.0f} | {r['peak_rss'] / r['json_bytes']:.2f}x |"
        )
    return "\n".join(lines)


def verdicts(rows: list[dict[str, float]]) -> list[str]:
    out = []
    slowest = min(r["json_bytes"] / MB / r["cpu_s"] for r in rows)
    out.append(
        f"- throughput ≥ {TARGET_MB_PER_CPU_S:.0f} MB of JSON per CPU second: slowest size {slowest:.0f} → "
        + ("met" if slowest >= TARGET_MB_PER_CPU_S else "NOT met")
    )
    big = [r for r in rows if r["json_bytes"] >= 1.9e9]
    if big:
        peak = big[0]["peak_rss"]
        out.append(
            f"- 2 GB trace peak RSS < 4 GiB: {peak / 1024**3:.2f} GiB → " + ("met" if peak < TARGET_PEAK_2GB else "NOT met")
        )
    return out


def write_doc(text: str) -> None:
    doc = DOC.read_text(encoding="utf-8")
    block = f"{MARK_START}\n{text}\n{MARK_END}"
    if MARK_START in doc:
        head, rest = doc.split(MARK_START, 1)
        doc = head + block + rest.split(MARK_END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(doc, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="250,500,1000,2000", help="comma-separated sizes in MB")
    ap.add_argument("-n", "--repeat", type=int, default=1, help="runs per size (least CPU time kept)")
    ap.add_argument("--write", action="store_true", help="write the table into docs/BENCHMARKS.md")
    ap.add_argument("--one", type=Path, metavar="TRACE", help="run the measured work once in this process and print its numbers (to time two commits side by side, each run in turn under /usr/bin/time)")
    args = ap.parse_args()
    if args.one:
        sys.argv = [sys.argv[0], str(args.one)]
        exec(WORKER, {"__name__": "__worker__"})
        return
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        path = ensure_trace(size)
        print(f"{path.name}: measuring", file=sys.stderr, flush=True)
        rows.append(measure(path, args.repeat))
    cmd = "python3 bench/scale_bench.py " + " ".join(sys.argv[1:])
    text = "\n".join(
        [
            f"Command: `{cmd.strip()}`",
            "",
            table(rows),
            "",
            *verdicts(rows),
            "",
            f"_{time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, {os.cpu_count()} CPUs; "
            "plain JSON generated from `hta/df_index_resolver` by `bench/gen_trace.py`._",
        ]
    )
    print(text)
    if args.write:
        write_doc(text)


if __name__ == "__main__":
    main()
