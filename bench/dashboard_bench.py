#!/usr/bin/env python3
"""How fast the dashboard answers on a 53.7 MB trace: a real ``kinetolens serve`` on loopback.

The logdir holds one run, ``hta/df_index_resolver/df_index_resolver.json.gz``
(53.7 MB of JSON).  Each repetition starts a fresh server process, so the
trace is never already in the server's memory, and measures from the first
``/api/view/overview`` request (which starts the load and answers 202 while
it runs) to the first 200 with the overview JSON, polling every 20 ms as a
client would (the page itself polls every 400 ms):

* **warm**: the cache entry of that trace exists (issue target: <= 2 s);
* **cold**: an empty cache directory, so the JSON is decoded and the cache written;
* **views**: once the trace is loaded (warm start), each view's JSON plus the
  first page of every table it names, in the order a user clicks through
  them; ``first`` computes the analyses, ``again`` is the same request once
  they are memoized.

Every number is the median of ``--repeat`` runs (3 by default).  Results go
to stdout; ``--write`` puts them between the ``dashboard-bench`` markers of
``docs/BENCHMARKS.md`` and leaves the rest of the file as it is.

Usage::

    python3 bench/dashboard_bench.py                # print
    python3 bench/dashboard_bench.py --write        # and update docs/BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_common import DOC, TRACES, git_revision, replace_doc_block
from tests.conftest import place
from tests.dashboard_helpers import LARGE, Server

MARK_START = "<!-- dashboard-bench:start -->"
MARK_END = "<!-- dashboard-bench:end -->"
TARGET_WARM_S = 2.0
POLL_S = 0.02
RUN, WORKER = "large", "worker0.pt.trace.json.gz"
VIEWS = ("overview", "operators", "kernels", "modules", "roofline", "memory", "timeline")
#: Users loading one page at the same moment, and how many such waves per view.
CONCURRENT, WAVES = 20, 3
TARGET_P95_S = 1.0


def query(**extra: str) -> str:
    return urlencode({"run": RUN, "worker": WORKER, **extra})


def first_overview_s(srv: Server, timeout: float = 300.0) -> float:
    """Seconds from the first overview request to the overview JSON (polling while it loads)."""
    path = f"/api/view/overview?{query()}"
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        status, body = srv.get_json(path, timeout=timeout)
        if status == 200:
            if body.get("state") != "ready":
                raise RuntimeError(f"overview failed: {body}")
            return time.perf_counter() - t0
        if status != 202:
            raise RuntimeError(f"overview answered {status}: {body}")
        time.sleep(POLL_S)
    raise TimeoutError(f"no overview within {timeout} s")


def view_s(srv: Server, view: str) -> float:
    """One view as the page gets it: its JSON, then the first page of each table it names."""
    t0 = time.perf_counter()
    status, body = srv.get_json(f"/api/view/{view}?{query()}", timeout=120)
    if status != 200 or body.get("state") != "ready":
        raise RuntimeError(f"{view} answered {status}: {str(body)[:200]}")
    for block in _tables(body["blocks"]):
        status, page = srv.get_json(f"/api/table/{block['source']}?{query(sort=block.get('sort') or '')}", timeout=120)
        if status != 200:
            raise RuntimeError(f"{view} table {block['source']} answered {status}: {str(page)[:200]}")
    return time.perf_counter() - t0


def concurrent_s(srv: Server, view: str, users: int = CONCURRENT) -> list[float]:
    """Seconds each of ``users`` simultaneous loads of ``view`` took (its JSON and tables' first pages)."""
    from concurrent.futures import ThreadPoolExecutor

    start = threading.Barrier(users)

    def one(_: int) -> float:
        start.wait()
        return view_s(srv, view)

    with ThreadPoolExecutor(users) as pool:
        return list(pool.map(one, range(users)))


def p95(samples: list[float]) -> float:
    """The 95th percentile, nearest rank (no interpolation between two requests)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _tables(blocks: list[dict]) -> list[dict]:
    out = []
    for b in blocks:
        if b.get("type") == "table":
            out.append(b)
        elif b.get("type") == "row":
            out.extend(_tables(b["blocks"]))
    return out


def measure(trace: Path, repeat: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="kinetolens-dashboard-bench-"))
    logdir = work / "logdir"
    (logdir / RUN).mkdir(parents=True)
    place(logdir / RUN / WORKER, trace)  # a copy: the dashboard serves no link out of its logdir
    cold, warm, first, again = [], [], {v: [] for v in VIEWS}, {v: [] for v in VIEWS}
    loaded: dict[str, list[float]] = {v: [] for v in VIEWS}
    for i in range(repeat):
        srv = Server(logdir, work / f"cache-{i}")  # an empty cache directory: a cold start
        try:
            cold.append(first_overview_s(srv))
        finally:
            srv.stop()
        srv = Server(logdir, work / f"cache-{i}")  # the cache the cold start wrote
        try:
            warm.append(first_overview_s(srv))
            for v in VIEWS:
                first[v].append(view_s(srv, v))
                again[v].append(view_s(srv, v))
            for v in VIEWS:
                for _ in range(WAVES):
                    loaded[v].extend(concurrent_s(srv, v))
        finally:
            srv.stop()
        print(f"[{i + 1}/{repeat}] cold {cold[-1]:.2f} s, warm {warm[-1]:.2f} s", file=sys.stderr)
    med = statistics.median
    return {
        "cold_s": med(cold), "warm_s": med(warm), "cold_all": cold, "warm_all": warm,
        "views": {v: (med(first[v]), med(again[v])) for v in VIEWS},
        "loaded": {v: (med(xs), p95(xs), max(xs), len(xs)) for v, xs in loaded.items()},
    }  # fmt: skip


def report(result: dict, trace: Path, repeat: int, command: str) -> str:
    mb = _json_mb(trace)
    met = "met" if result["warm_s"] <= TARGET_WARM_S else "**not met**"
    heaviest = max(result["loaded"], key=lambda v: result["loaded"][v][1])
    worst = result["loaded"][heaviest][1]
    met_p95 = "met" if worst <= TARGET_P95_S else "**not met**"
    lines = [
        "## Dashboard: `kinetolens serve` on a 53.7 MB trace",
        "",
        f"Command: `{command}`",
        "",
        (f"Trace: `hta/df_index_resolver/df_index_resolver.json.gz` ({mb:.1f} MB of JSON); a fresh "
        f"`kinetolens serve` per run; median of {repeat}."),
        "",
        "| first overview request → overview JSON | seconds | runs |",
        "|---|---:|---|",
        f"| warm (cache entry present) | {result['warm_s']:.2f} | "
        + ", ".join(f"{x:.2f}" for x in result["warm_all"]) + " |",
        "| cold (empty cache: decode and write it) | "
        f"{result['cold_s']:.2f} | " + ", ".join(f"{x:.2f}" for x in result["cold_all"]) + " |",
        "",
        "| view (JSON + first page of its tables) | first, ms | again (memoized), ms |",
        "|---|---:|---:|",
        *(f"| {v} | {a * 1000:,.0f} | {b * 1000:,.0f} |" for v, (a, b) in result["views"].items()),
        "",
        "The overview row's `first` follows the timed overview request above, so it is its tables' first pages.",
        "",
        (f"Under load: {CONCURRENT} clients load the same page at once (each its JSON, then its tables' "
        f"first pages), {WAVES} times per run, once the page's analyses are memoized; latency per client."),
        "",
        "| view, 20 at once | median ms | p95 ms | max ms | requests |",
        "|---|---:|---:|---:|---:|",
        *(f"| {v} | {a * 1000:,.0f} | {b * 1000:,.0f} | {c * 1000:,.0f} | {n} |" for v, (a, b, c, n) in result["loaded"].items()),
        "",
        f"- overview within {TARGET_WARM_S:.0f} s once cached: {result['warm_s']:.2f} s → {met}",
        f"- heaviest page ({heaviest}) p95 under load within {TARGET_P95_S:.0f} s: {worst:.2f} s → {met_p95}",
        "",
        (f"_{time.strftime('%Y-%m-%d')}, {git_revision()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs (shared; load average {os.getloadavg()[0]:.1f} at the end)._"),
    ]
    return "\n".join(lines)


def _json_mb(trace: Path) -> float:
    from bench.bench_common import uncompressed_size

    return uncompressed_size(trace) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, default=TRACES / LARGE, help="trace to serve (default: the 53.7 MB HTA one)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write", action="store_true", help="update the dashboard-bench block of docs/BENCHMARKS.md")
    args = ap.parse_args()
    if not args.trace.exists():
        sys.exit(f"{args.trace}: no such trace (../shared/traces must sit beside the checkout)")
    command = "python3 bench/dashboard_bench.py" + (f" --repeat {args.repeat}" if args.repeat != 3 else "") + " --write"
    block = report(measure(args.trace.resolve(), args.repeat), args.trace, args.repeat, command)
    print(block)
    if args.write:
        replace_doc_block(DOC, MARK_START, MARK_END, block)


if __name__ == "__main__":
    main()
