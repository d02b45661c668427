#!/usr/bin/env python3
"""The step breakdown of a trace loaded whole against one loaded a step at a time.

For each trace, each measurement runs in a fresh process and reports its CPU
seconds (user + system) and peak RSS:

* ``whole``: ``kinetolens.load(trace, cache=False)`` and ``step_breakdown``;
* ``windowed``: ``kinetolens.windowed.open_windows`` (decode to Parquet parts
  in a temporary folder, step index) and ``windowed_breakdown`` over every
  step's window, each window's trace dropped before the next is built.

Both print a digest of the breakdown table; the script fails if they differ
(the tests check equality on real traces; this checks it at size).

Usage::

    python3 bench/windowed_memory.py TRACE [TRACE ...] [-n 1] [--windowed-only]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

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


def measured(code: str, args: list[str]) -> tuple[float, float, str]:
    """CPU seconds, peak MiB and stdout of one fresh process running ``code``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read().decode().strip() if proc.stdout else ""
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"windowed_memory: {args[0]}: failed: {err.strip().splitlines()[-1:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("-n", "--rounds", type=int, default=1)
    ap.add_argument("--windowed-only", action="store_true", help="skip the whole load (a trace larger than memory)")
    ap.add_argument("--spill-dir", default=tempfile.gettempdir(), help="where the Parquet parts go")
    args = ap.parse_args(argv)
    print("| trace | JSON MB | whole (CPU s / peak MiB) | windowed (CPU s / peak MiB) | windowed / whole |")
    print("|---|---|---|---|---|")
    for trace in args.traces:
        mb = Path(trace).stat().st_size / 1e6
        kinds = [("windowed", WINDOWED)] if args.windowed_only else [("whole", WHOLE), ("windowed", WINDOWED)]
        runs: dict[str, list[tuple[float, float, str]]] = {}
        for _ in range(args.rounds):
            for name, code in kinds:
                runs.setdefault(name, []).append(measured(code, [trace, args.spill_dir]))
        med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v), v[0][2]) for k, v in runs.items()}
        if "whole" in med and med["whole"][2] != med["windowed"][2]:
            sys.exit(f"windowed_memory: {trace}: the breakdowns differ ({med['whole'][2]} vs {med['windowed'][2]})")
        cell = {k: f"{v[0]:.1f} / {v[1]:,.0f}" for k, v in med.items()}
        ratio = (
            f"{med['windowed'][0] / med['whole'][0]:.2f} / {med['windowed'][1] / med['whole'][1]:.2f}" if "whole" in med else "-"
        )
        print(f"| {Path(trace).name} | {mb:,.0f} | {cell.get('whole', '-')} | {cell['windowed']} | {ratio} |")
    print(f"\nmedians of {args.rounds} round(s), each a fresh process; CPU = user + system seconds")


if __name__ == "__main__":
    main()
