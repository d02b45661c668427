#!/usr/bin/env python3
"""Side-by-side load benchmark: ``kinetolens.load`` vs HolisticTraceAnalysis.

Every measurement runs in a fresh subprocess so that its peak RSS is its own.
Per trace and per repetition the script runs, in this order:

* ``hta``       -- ``TraceAnalysis(trace_dir=tmpdir)`` where ``tmpdir`` holds
                   only a symlink to the trace (HTA venv interpreter);
* ``kl-cold``   -- ``kinetolens.load(path, cache=False)``: decode + build model;
* ``kl-build``  -- ``kinetolens.load(path, cache=<fresh tmp dir>)``: first load,
                   writes the cache (reported, not a target);
* ``kl-cached`` -- the same call again in a new process, reading that cache.

For kinetolens the timed region is ``load(...)`` followed by touching
``.kernels`` and ``.ops`` (so lazily-built tables are paid for, as HTA's
constructor builds its dataframes eagerly).  The time of ``load(...)`` alone is
kept in ``--json`` output as ``load_only_s``.

Memory: each worker reports VmRSS right after its imports and VmHWM (peak
RSS) at the end, read from ``/proc/self/status``; the parent cross-checks the
peak with ``os.wait4`` (per-child ``ru_maxrss``) and reports the larger one,
which also covers any grandchildren that the worker waited for.

HolisticTraceAnalysis lives in its own venv (``bench/.venvs/hta``, created
once and reused); it is never a dependency of kinetolens.  Creation aborts if
resolving HTA would install torch.

Usage::

    python3 bench/load_bench.py                 # default traces, 3 repetitions
    python3 bench/load_bench.py -n 5 --write    # also update docs/BENCHMARKS.md
    python3 bench/load_bench.py --trace some.json.gz --tools kl-cold,kl-cached
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_common import (
    DOC,
    MB,
    REPO,
    TRACES,
    emit_result,
    ensure_venv,
    git_revision,
    kinetolens_available,
    package_version,
    proc_status_kb,
    query_python,
    replace_doc_block,
    run_measured,
    uncompressed_size,
)

HTA_VENV = REPO / "bench" / ".venvs" / "hta"
HTA_SPEC_DEFAULT = ["HolisticTraceAnalysis==0.5.0", "pandas<3"]
MARK_START = "<!-- load-bench:start -->"
MARK_END = "<!-- load-bench:end -->"
DEFAULT_TRACES = [
    TRACES / "hta/df_index_resolver/df_index_resolver.json.gz",
    TRACES / "hta/trace_diff/control/control.json.gz",
]
TOOLS = ["hta", "kl-cold", "kl-build", "kl-cached"]
TOOL_LABEL = {
    "hta": "HTA `TraceAnalysis(trace_dir=…)`",
    "kl-cold": "kinetolens `load(cache=False)`",
    "kl-build": "kinetolens `load(cache=dir)`, first (writes cache)",
    "kl-cached": "kinetolens `load(cache=dir)`, cached reload",
}

# Targets from the issue.
TARGET_SPEEDUP = 5.0
TARGET_PEAK_OVER_JSON = 2.0
TARGET_CACHED_S = 0.5


# --------------------------------------------------------------------------
# worker side (runs in the measured subprocess)
# --------------------------------------------------------------------------

def _worker(tool: str, path: str, cache_dir: str | None) -> None:
    out: dict = {"tool": tool}
    if tool == "hta":
        import logging

        import pandas  # noqa: F401  (HTA imports it anyway; count it in "after imports")
        from hta.trace_analysis import TraceAnalysis

        logging.disable(logging.WARNING)  # HTA logs per-rank progress at INFO/WARNING
        out["rss_after_imports_kb"] = proc_status_kb("VmRSS")
        tmp = tempfile.mkdtemp(prefix="loadbench-hta-")
        try:
            os.symlink(os.path.abspath(path), os.path.join(tmp, os.path.basename(path)))
            t0 = time.perf_counter()
            ta = TraceAnalysis(trace_dir=tmp)
            out["time_s"] = time.perf_counter() - t0
            out["rows"] = {
                f"rank{r}": len(df) for r, df in ta.t.traces.items()
            }
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        # Tuned as the `kinetolens` command is: polars' allocator options
        # only take effect before polars loads.
        import kinetolens

        kinetolens.tune_allocator()
        import polars  # noqa: F401  (the result is polars frames; import it before timing)

        import kinetolens.loader  # noqa: F401  (the analyzer's modules, as HTA's imports above)

        out["rss_after_imports_kb"] = proc_status_kb("VmRSS")
        cache: object = False if tool == "kl-cold" else cache_dir
        t0 = time.perf_counter()
        tr = kinetolens.load(path, cache=cache)
        t1 = time.perf_counter()
        kernels, ops = tr.kernels, tr.ops
        t2 = time.perf_counter()
        out["load_only_s"] = t1 - t0
        out["time_s"] = t2 - t0
        out["rows"] = {"kernels": int(kernels.height), "ops": int(ops.height)}
        if cache_dir is not None:
            out["cache_bytes"] = sum(
                f.stat().st_size for f in Path(cache_dir).rglob("*") if f.is_file()
            )
    out["peak_rss_kb"] = proc_status_kb("VmHWM")
    emit_result(out)


# --------------------------------------------------------------------------
# parent side
# --------------------------------------------------------------------------

def ensure_hta_venv(spec: list[str], base_python: str) -> Path:
    """Create ``bench/.venvs/hta`` once; reuse it when its spec matches."""
    return ensure_venv(HTA_VENV, spec, base_python)


def run_worker(python: str, tool: str, path: Path, cache_dir: str | None,
               timeout: float) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--_worker", tool, "--_path", str(path)]
    if cache_dir is not None:
        cmd += ["--_cache", cache_dir]
    return run_measured(cmd, f"{tool} on {path.name}", timeout)


def summarize(runs: list[dict]) -> dict:
    def med(key):
        return statistics.median(r[key] for r in runs)

    return {
        "n": len(runs),
        "time_s": med("time_s"),
        "time_min_s": min(r["time_s"] for r in runs),
        "time_max_s": max(r["time_s"] for r in runs),
        "rss_after_imports_mb": med("rss_after_imports_kb") / 1024,
        "peak_mb": med("peak_kb") / 1024,
        "growth_mb": statistics.median(
            (r["peak_kb"] - r["rss_after_imports_kb"]) for r in runs
        ) / 1024,
        "rows": runs[-1].get("rows"),
        "load_only_s": (med("load_only_s") if "load_only_s" in runs[0] else None),
        "cache_mb": (
            statistics.median(r["cache_bytes"] for r in runs) / MB
            if "cache_bytes" in runs[0] else None
        ),
    }


def fmt_table(results: dict, meta: dict) -> str:
    lines = []
    for tpath, info in results.items():
        json_mb = info["json_bytes"] / MB
        lines.append(
            f"**`{Path(tpath).relative_to(TRACES) if tpath.startswith(str(TRACES)) else tpath}`** "
            f"— {info['gz_bytes'] / MB:.1f} MiB gzip, {json_mb:.1f} MiB ({info['json_bytes'] / 1e6:.1f} MB) JSON uncompressed"
        )
        lines.append("")
        lines.append(
            "| run | median s (min–max) | speed vs HTA (min–max) | RSS after imports MiB | peak RSS MiB "
            "| growth MiB | peak / JSON | growth / JSON |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for tool in TOOLS:
            s = info["tools"].get(tool)
            if s is None:
                continue
            if "vs_hta" in s:
                ratio = f"{s['vs_hta']:.1f}x ({s['vs_hta_min']:.1f}–{s['vs_hta_max']:.1f})"
            else:
                ratio = "—"
            lines.append(
                f"| {TOOL_LABEL[tool]} | {s['time_s']:.2f} ({s['time_min_s']:.2f}–{s['time_max_s']:.2f}) "
                f"| {ratio} | {s['rss_after_imports_mb']:.0f} | {s['peak_mb']:.0f} "
                f"| {s['growth_mb']:.0f} | {s['peak_mb'] / json_mb:.2f}x | {s['growth_mb'] / json_mb:.2f}x |"
            )
        lines.append("")
        rows = []
        for tool in TOOLS:
            s = info["tools"].get(tool)
            if s and s.get("rows"):
                extra = ""
                if s.get("cache_mb") is not None and tool == "kl-build":
                    extra = f", cache {s['cache_mb']:.1f} MiB on disk"
                rows.append(f"{tool}: {s['rows']}{extra}")
        if rows:
            lines.append("Rows: " + "; ".join(f"`{r}`" for r in rows))
            lines.append("")
        lines.extend(_targets(info) + [""])
    lines.append(
        "_Speed vs HTA: HTA time / kinetolens time within the same repetition "
        "(back-to-back processes), median and range over repetitions._"
    )
    lines.append("")
    lines.append(
        f"_n = {meta['n']} runs per row, medians; {meta['date']}, Python {meta['python']}, "
        f"{meta['hta']}, kinetolens {meta['kinetolens']} (`{meta['git']}`), "
        f"polars {meta['polars']}, {meta['cpus']} CPUs._"
    )
    return "\n".join(lines)


def _targets(info: dict) -> list[str]:
    t = info["tools"]
    json_mb = info["json_bytes"] / MB
    out = []
    if "vs_hta" in t.get("kl-cold", {}):
        r = t["kl-cold"]["vs_hta"]
        out.append(
            f"- cold load ≥ {TARGET_SPEEDUP:.0f}x faster than HTA: {r:.1f}x "
            f"(median of per-repetition HTA/kinetolens time ratios) → "
            f"{'met' if r >= TARGET_SPEEDUP else 'NOT met'}"
        )
    if "kl-cold" in t:
        p, g = t["kl-cold"]["peak_mb"], t["kl-cold"]["growth_mb"]
        out.append(
            f"- cold load peak RSS < {TARGET_PEAK_OVER_JSON:.0f}x JSON ({TARGET_PEAK_OVER_JSON * json_mb:.0f} MiB): "
            f"total peak {p:.0f} MiB ({p / json_mb:.2f}x) → {'met' if p < TARGET_PEAK_OVER_JSON * json_mb else 'NOT met'}; "
            f"growth over imports {g:.0f} MiB ({g / json_mb:.2f}x) → "
            f"{'met' if g < TARGET_PEAK_OVER_JSON * json_mb else 'NOT met'}"
        )
    if "kl-cached" in t:
        c = t["kl-cached"]["time_s"]
        out.append(
            f"- cached reload < {TARGET_CACHED_S} s: {c:.3f} s → {'met' if c < TARGET_CACHED_S else 'NOT met'}"
        )
    return out


def write_doc(table: str, command: str) -> None:
    replace_doc_block(DOC, MARK_START, MARK_END, f"Command: `{command}`\n\n{table}")


def _meta(n: int, kl_python: str, hta_python: str | None) -> dict:
    return {
        "n": n,
        "date": time.strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "git": git_revision(),
        "kinetolens": package_version(kl_python, "kinetolens"),
        "polars": query_python(kl_python, "import polars; print(polars.__version__)"),
        "hta": ("HTA " + query_python(hta_python, "import importlib.metadata as m; "
                                      "print(m.version('HolisticTraceAnalysis'), '/ pandas', m.version('pandas'))")
                if hta_python else "HTA not run"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", action="append", type=Path,
                    help="trace to benchmark (repeatable); default: df_index_resolver + trace_diff/control")
    ap.add_argument("-n", "--repeat", type=int, default=3, help="runs per measurement (median reported)")
    ap.add_argument("--tools", default=",".join(TOOLS),
                    help=f"comma-separated subset of {','.join(TOOLS)}")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter that has kinetolens installed (default: this one)")
    ap.add_argument("--hta-spec", nargs="+", default=HTA_SPEC_DEFAULT,
                    help="pip requirements for the HTA venv")
    ap.add_argument("--wait-for-kinetolens", type=float, default=0, metavar="MIN",
                    help="poll up to MIN minutes for kinetolens.load to exist before running its side")
    ap.add_argument("--timeout", type=float, default=1200, help="per-subprocess timeout, s")
    ap.add_argument("--write", action="store_true", help=f"write the table into {DOC.relative_to(REPO)}")
    ap.add_argument("--json", type=Path, help="also dump raw per-run results here")
    ap.add_argument("--_worker", help=argparse.SUPPRESS)
    ap.add_argument("--_path", help=argparse.SUPPRESS)
    ap.add_argument("--_cache", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._worker:
        _worker(args._worker, args._path, args._cache)
        return 0

    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        ap.error(f"unknown tools {sorted(unknown)}")
    if "kl-cached" in tools and "kl-build" not in tools:
        tools.append("kl-build")  # the cached reload needs a cache built first
    tools = [t for t in TOOLS if t in tools]
    traces = [p.resolve() for p in (args.trace or DEFAULT_TRACES)]
    for p in traces:
        if not p.is_file():
            ap.error(f"no such trace: {p}")

    hta_python = str(ensure_hta_venv(args.hta_spec, sys.executable)) if "hta" in tools else None

    if any(t.startswith("kl-") for t in tools):
        ok, why = kinetolens_available(args.python)
        deadline = time.time() + args.wait_for_kinetolens * 60
        while not ok and time.time() < deadline:
            print(f"[wait] kinetolens.load not available yet ({why}); retrying in 120 s",
                  file=sys.stderr)
            time.sleep(120)
            ok, why = kinetolens_available(args.python)
        if not ok:
            print(f"[skip] kinetolens.load not available ({why}); running HTA only",
                  file=sys.stderr)
            tools = [t for t in tools if not t.startswith("kl-")]
    if not tools:
        print("nothing to run", file=sys.stderr)
        return 1

    results: dict = {}
    raw: dict = {}
    for path in traces:
        info = {"gz_bytes": path.stat().st_size, "json_bytes": uncompressed_size(path), "tools": {}}
        runs: dict[str, list[dict]] = {t: [] for t in tools}
        for i in range(args.repeat):
            cache_dir = tempfile.mkdtemp(prefix="loadbench-cache-")
            try:
                for tool in tools:
                    python = hta_python if tool == "hta" else args.python
                    cd = cache_dir if tool in ("kl-build", "kl-cached") else None
                    r = run_worker(python, tool, path, cd, args.timeout)
                    runs[tool].append(r)
                    print(
                        f"[{path.name} #{i + 1}/{args.repeat}] {tool:9s} {r['time_s']:8.3f} s  "
                        f"peak {r['peak_kb'] / 1024:7.0f} MiB  after-imports "
                        f"{r['rss_after_imports_kb'] / 1024:5.0f} MiB  rows {r.get('rows')}",
                        file=sys.stderr, flush=True,
                    )
            finally:
                shutil.rmtree(cache_dir, ignore_errors=True)
        info["tools"] = {t: summarize(rs) for t, rs in runs.items() if rs}
        if runs.get("hta"):
            for t, rs in runs.items():
                if t != "hta" and rs:
                    paired = [h["time_s"] / r["time_s"] for h, r in zip(runs["hta"], rs)]
                    info["tools"][t]["vs_hta"] = statistics.median(paired)
                    info["tools"][t]["vs_hta_min"] = min(paired)
                    info["tools"][t]["vs_hta_max"] = max(paired)
        results[str(path)] = info
        raw[str(path)] = runs

    meta = _meta(args.repeat, args.python, hta_python)
    table = fmt_table(results, meta)
    cmd_args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--write"]
    command = " ".join(["python3", "bench/load_bench.py", *cmd_args])
    print(table)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results, "runs": raw}, indent=1))
    if args.write:
        write_doc(table, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
