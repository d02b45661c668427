"""Whole-process cost of the kinetolens command's help: CPU seconds, wall
seconds and peak RSS of fresh processes, median of ``-n`` runs per command.

    python3 bench/cli_startup_bench.py -n 10 [--src DIR ...]

Each ``--src`` is a checkout's ``src`` folder put first on PYTHONPATH (default:
this checkout's), so two versions can be measured in one run, interleaved.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (["--help"], ["run", "--help"], ["ops", "--help"], ["diff", "--help"], ["memory", "--help"], ["roofline", "--help"], ["phases", "--help"])


def one_run(src: str, args: list[str]) -> tuple[float, float, float]:
    """(CPU s, wall s, peak RSS MiB) of one ``python -m kinetolens.cli.main ARGS``."""
    env = {**os.environ, "PYTHONPATH": src}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "kinetolens.cli.main", *args], env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--src", action="append", default=None)
    opts = parser.parse_args()
    sources = opts.src or [str(Path(__file__).resolve().parents[1] / "src")]
    print("| command | src | CPU s | wall s | peak RSS MiB |")
    print("|---|---|---:|---:|---:|")
    for args in COMMANDS:
        runs: dict[str, list[tuple[float, float, float]]] = {s: [] for s in sources}
        for _ in range(opts.n):
            for src in sources:  # interleaved: a drift in the machine's speed hits every version alike
                runs[src].append(one_run(src, args))
        for src in sources:
            cpu, wall, rss = (statistics.median(x) for x in zip(*runs[src]))
            print(f"| `kinetolens {' '.join(args)}` | {src} | {cpu:.2f} | {wall:.2f} | {rss:.0f} |")


if __name__ == "__main__":
    main()
