#!/usr/bin/env python3
"""What ``kinetolens summary`` costs beside loading the trace and its step breakdown.

For each trace, each measurement runs in a fresh process (``N`` rounds) and
reports the process's CPU seconds (user + system, the OS's accounting of the
finished child) and its peak RSS:

* ``load``: ``kinetolens.load(trace, cache=False)`` and
  ``step_breakdown(trace)`` through the API (ingest, model, breakdown);
* ``load cached``: the same from a filled cache;
* ``summary cold``: ``kinetolens summary TRACE`` with an empty cache
  directory (ingest, cache write, every analysis of the summary);
* ``summary cached``: ``kinetolens summary TRACE`` again, the cache filled;
* ``report cold``: ``kinetolens report TRACE -o FILE`` with an empty cache
  directory (everything the summary does, and the report's own sections).

The table shows medians and the ratios summary cold / load, summary
cached / load (and summary cached / load cached: what the analyses add) and
report cold / load, of CPU time and of peak memory.
kinetolens only: the reference tools' load times are ``bench/compare.py``'s.

Usage::

    python3 bench/summary_cost.py TRACE [TRACE ...] [-n 3] [--src src]

Run it from the checkout; ``--src`` is the ``kinetolens`` source tree to
measure (default: this checkout's ``src``), so an older commit can be
measured the same way (``git archive COMMIT src | tar -x -C /tmp/old``).
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

LOAD = """
import sys, kinetolens
from kinetolens.analysis.gputime.overview import step_breakdown
t = kinetolens.load(sys.argv[1], cache=sys.argv[2] == "cached")
step_breakdown(t)
"""


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """CPU seconds and peak RSS (MiB) of one run of ``cmd`` in a fresh process."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"summary_cost: {' '.join(cmd[:4])} ... failed ({proc.returncode}): {err.strip().splitlines()[-1:] or ''}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure(trace: str, rounds: int, src: Path) -> dict[str, tuple[float, float]]:
    """Median CPU seconds and peak MiB of each measurement on ``trace``."""
    py = sys.executable
    base = {**os.environ, "PYTHONPATH": str(src)}
    runs: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="summary_cost_") as tmp:
        cache = Path(tmp) / "cache"
        env = {**base, "KINETOLENS_CACHE_DIR": str(cache)}
        for _ in range(rounds):
            runs.setdefault("load", []).append(run([py, "-c", LOAD, trace, "cold"], env))
            subprocess.run(["rm", "-rf", str(cache)], check=True)
            runs.setdefault("summary cold", []).append(run([py, "-m", "kinetolens.cli.main", "summary", trace], env))
            runs.setdefault("summary cached", []).append(run([py, "-m", "kinetolens.cli.main", "summary", trace], env))
            runs.setdefault("load cached", []).append(run([py, "-c", LOAD, trace, "cached"], env))
            subprocess.run(["rm", "-rf", str(cache)], check=True)
            page = str(Path(tmp) / "report.html")
            runs.setdefault("report cold", []).append(run([py, "-m", "kinetolens.cli.main", "report", trace, "-o", page], env))
    return {k: (statistics.median(c for c, _ in v), statistics.median(m for _, m in v)) for k, v in runs.items()}


def table(results: dict[str, dict[str, tuple[float, float]]], rounds: int) -> str:
    """A markdown table: CPU seconds / peak MiB per measurement, and the ratios."""
    keys = ["load", "load cached", "summary cold", "summary cached", "report cold"]
    head = ["trace", *[f"{k} (CPU s / peak MiB)" for k in keys]]
    head += ["summary cold / load", "cached / load", "cached / load cached", "report cold / load"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for trace, r in results.items():
        cells = [Path(trace).name]
        cells += [f"{r[k][0]:.2f} / {r[k][1]:,.0f}" if k in r else "-" for k in keys]
        a, ac, b, c, rep = (r[k] for k in keys)
        cells += [f"{b[0] / a[0]:.2f} / {b[1] / a[1]:.2f}", f"{c[0] / a[0]:.2f}", f"{c[0] / ac[0]:.2f}"]
        cells.append(f"{rep[0] / a[0]:.2f} / {rep[1] / a[1]:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(
        f"\nmedians of {rounds} rounds, each measurement a fresh process; CPU = user + system seconds; "
        "the ratios of the cold runs are of CPU time / of peak memory"
    )
    lines.append("")
    lines += verdicts(results)
    return "\n".join(lines)


#: The first answer's budget: a cold summary (and report) costs at most this
#: times the load and step breakdown, in CPU time and in peak memory.
TARGET_RATIO = 1.3


def verdicts(results: dict[str, dict[str, tuple[float, float]]]) -> list[str]:
    """One line per command: whether its cold run kept within :data:`TARGET_RATIO` on every trace."""
    out = []
    for key in ("summary cold", "report cold"):
        ratios = {Path(t).name: (r[key][0] / r["load"][0], r[key][1] / r["load"][1]) for t, r in results.items()}
        met = all(cpu <= TARGET_RATIO and peak <= TARGET_RATIO for cpu, peak in ratios.values())
        shown = "; ".join(f"{name} {cpu:.2f}x / {peak:.2f}x" for name, (cpu, peak) in ratios.items())
        out.append(f"- {key.split()[0]} cold within {TARGET_RATIO}x the load + breakdown (CPU / peak): {'met' if met else '**NOT met**'} - {shown}")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("-n", "--rounds", type=int, default=3)
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="kinetolens source tree to measure")
    args = ap.parse_args(argv)
    for t in args.traces:
        if not Path(t).exists():
            sys.exit(f"summary_cost: {t}: no such file")
    results = {t: measure(t, args.rounds, args.src.resolve()) for t in args.traces}
    print(table(results, args.rounds))


if __name__ == "__main__":
    main()
