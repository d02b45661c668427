#!/usr/bin/env python3
"""A trace read whole against one read a step window at a time.

For each trace, each measurement runs in a fresh process and reports its CPU
seconds (user + system) and peak RSS:

* ``whole``: ``kinetolens.load(trace, cache=False)`` and ``step_breakdown``;
* ``windowed``: ``kinetolens.windowed.open_windows`` (decode to Parquet parts
  in a temporary folder, step index) and ``windowed_breakdown`` over every
  step's window, each window's trace dropped before the next is built.

Both print a digest of the breakdown table; the script fails if they differ
(the tests check equality on real traces; this checks it at size).
With ``--summary`` it measures ``kinetolens summary --whole`` against
``kinetolens summary --windows`` instead (an empty cache each), and fails if
their step breakdowns differ.  With ``--report``, ``kinetolens report
--whole`` against ``kinetolens report --windows`` (markdown, an empty cache
each), failing if their op and kernel tables differ.

Usage::

    python3 bench/windowed_memory.py TRACE [TRACE ...] [-n 1] [--windowed-only] [--summary | --report]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from kinetolens.ingest.kineto_parallel import estimated_json_bytes  # noqa: E402

WHOLE = """
import sys, kinetolens
from kinetolens.analysis.gputime.overview import step_breakdown
t = kinetolens.load(sys.argv[1], cache=False)
b = step_breakdown(t)
print(b.height, b.hash_rows().sum())
"""

WINDOWED = """
import sys, tempfile, kinetolens
from kinetolens.windowed import open_windows
from kinetolens.analysis.gputime.overview import windowed_breakdown
with tempfile.TemporaryDirectory(dir=sys.argv[2]) as d:
    w = open_windows(sys.argv[1], d)
    b = windowed_breakdown((win.step, t) for win, t in w.traces())
print(b.height, b.hash_rows().sum())
"""


def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """CPU seconds, peak MiB and stdout of one fresh process running ``argv``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status):
            sys.exit(f"windowed_memory: {' '.join(argv[-3:])}: failed: {err.read().decode(errors='replace').strip().splitlines()[-1:]}")
        return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read().decode().strip()


def summary_steps(trace: str, mode: str) -> tuple[float, float, str]:
    """``kinetolens summary MODE --json TRACE`` with an empty cache: CPU, peak and a digest of its steps block."""
    with tempfile.TemporaryDirectory() as cache:
        cpu, peak, out = run([sys.executable, "-m", "kinetolens.cli.main", "summary", mode, "--json", trace],
                             {"KINETOLENS_CACHE_DIR": cache})
    return cpu, peak, hashlib.sha256(json.dumps(json.loads(out)["steps"], sort_keys=True).encode()).hexdigest()[:16]


def report_tables(trace: str, mode: str) -> tuple[float, float, str]:
    """``kinetolens report MODE --format md TRACE`` with an empty cache: CPU, peak and a digest of its op and kernel tables."""
    with tempfile.TemporaryDirectory() as cache:
        md = Path(cache) / "report.md"
        cpu, peak, _ = run([sys.executable, "-m", "kinetolens.cli.main", "report", mode, "--format", "md", "-o", str(md), trace],
                           {"KINETOLENS_CACHE_DIR": cache})
        text = md.read_text()
    tables = text.split("\n## Top ops\n", 1)[1].split("\n## Modules", 1)[0].split("\n_Modules left out", 1)[0]
    return cpu, peak, hashlib.sha256(tables.encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("-n", "--rounds", type=int, default=1)
    ap.add_argument("--windowed-only", action="store_true", help="skip the whole load (a trace larger than memory)")
    ap.add_argument("--spill-dir", default=tempfile.gettempdir(), help="where the Parquet parts go")
    ap.add_argument("--summary", action="store_true", help="measure the summary command, whole and windowed")
    ap.add_argument("--report", action="store_true", help="measure the report command (markdown), whole and windowed")
    args = ap.parse_args(argv)
    print("| trace | JSON MB | whole (CPU s / peak MiB) | windowed (CPU s / peak MiB) | windowed / whole |")
    print("|---|---|---|---|---|")
    for trace in args.traces:
        mb = estimated_json_bytes(Path(trace)) / 1e6
        kinds = ["windowed"] if args.windowed_only else ["whole", "windowed"]
        runs: dict[str, list[tuple[float, float, str]]] = {}
        for _ in range(args.rounds):
            for name in kinds:
                mode = "--whole" if name == "whole" else "--windows"
                if args.summary:
                    runs.setdefault(name, []).append(summary_steps(trace, mode))
                elif args.report:
                    runs.setdefault(name, []).append(report_tables(trace, mode))
                else:
                    code = WHOLE if name == "whole" else WINDOWED
                    runs.setdefault(name, []).append(run([sys.executable, "-c", code, trace, args.spill_dir]))
        med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v), v[0][2]) for k, v in runs.items()}
        if "whole" in med and med["whole"][2] != med["windowed"][2]:
            sys.exit(f"windowed_memory: {trace}: the results differ ({med['whole'][2]} vs {med['windowed'][2]})")
        cell = {k: f"{v[0]:.1f} / {v[1]:,.0f}" for k, v in med.items()}
        ratio = (
            f"{med['windowed'][0] / med['whole'][0]:.2f} / {med['windowed'][1] / med['whole'][1]:.2f}" if "whole" in med else "-"
        )
        print(f"| {Path(trace).name} | {mb:,.0f} | {cell.get('whole', '-')} | {cell['windowed']} | {ratio} |")
    print(f"\nmedians of {args.rounds} round(s), each a fresh process; CPU = user + system seconds")


if __name__ == "__main__":
    main()
