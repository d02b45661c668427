#!/usr/bin/env python3
"""Side-by-side benchmark: kinetolens vs HolisticTraceAnalysis, torch-tb-profiler, TraceLens.

One invocation runs every tool on the same traces, each measurement in a
fresh process (helpers in ``bench_common.py``), and reports per trace and
tool: load time, analysis time, peak RSS, and kinetolens' ratio to each
(their time / ours, their peak / ours).

What each tool does (the same questions: where did GPU time go, which
kernels dominate):

* ``kinetolens`` -- ``kinetolens.load(path, cache=False)`` (plus touching
  ``.kernels``/``.ops``) is the load; ``overview.step_breakdown``,
  ``idle.temporal_breakdown`` and ``idle.kernel_breakdown`` the analysis.
* ``hta``  -- HolisticTraceAnalysis: ``TraceAnalysis(trace_dir=…)`` is the
  load; ``get_temporal_breakdown()`` and ``get_gpu_kernel_breakdown()`` the
  analysis (``visualize=False``).
* ``tbp``  -- torch-tb-profiler: ``RunLoader(…).load()`` on a run directory
  holding the trace as ``worker0.pt.trace.json[.gz]``.  It parses each worker
  in a spawned process and computes every view (overview, operators,
  kernels, ...) while loading, so its one number is load + analysis and is
  compared with kinetolens' load + analysis.
* ``tracelens`` -- AMD's TraceLens, only with ``--tracelens-src DIR`` (a
  local checkout; it is not on PyPI, the PyPI ``tracelens`` is another
  project): ``TreePerfAnalyzer.from_file`` is the load,
  ``get_df_gpu_timeline()`` and ``get_df_kernel_launchers()`` the analysis.

Every reference tool lives in its own venv under ``bench/.venvs/`` created
by this script (never with torch in it).  Peak memory is the largest of the
worker's VmHWM, ``wait4``'s ``ru_maxrss`` and the summed RSS of all
processes in the worker's session sampled every 50 ms (which is what counts
for tb-profiler's parser processes).  A run over ``--timeout`` seconds or
``--mem-cap-gib`` of summed RSS is killed and recorded as "did not finish";
a tool that did not finish on a trace is not run on larger ones.

Usage::

    python3 bench/compare.py                       # default traces and tools, n=1
    python3 bench/compare.py -n 3 --write --json bench/out/compare.json
    python3 bench/compare.py --traces a.json.gz b.json --tools kinetolens,hta
    python3 bench/compare.py --max-size-for tbp=600 --max-size-for hta=3000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_common import (
    DOC,
    GIB,
    MB,
    REPO,
    TRACES,
    WorkerFailed,
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

GENERATED = REPO / "bench" / "out"
MARK_START = "<!-- compare-bench:start -->"
MARK_END = "<!-- compare-bench:end -->"
VENVS = REPO / "bench" / ".venvs"

TOOLS = ("kinetolens", "kl-summary", "kl-report", "hta", "tbp", "tracelens")
#: kinetolens' commands end to end (an empty cache): compared with the load + breakdown and the reference tools.
COMMANDS = ("kl-summary", "kl-report")
REFERENCE_TOOLS = ("hta", "tbp", "tracelens")
LABEL = {
    "kinetolens": "kinetolens",
    "kl-summary": "`kinetolens summary`",
    "kl-report": "`kinetolens report`",
    "hta": "HolisticTraceAnalysis",
    "tbp": "torch-tb-profiler",
    "tracelens": "TraceLens",
}
VENV_SPEC = {
    "hta": ["HolisticTraceAnalysis==0.5.0", "pandas<3"],
    "tbp": ["torch-tb-profiler==0.4.3", "pandas<3"],
}
#: Tools whose load already computes their analyses (one number: load + analysis).
ANALYSIS_IN_LOAD = {"tbp", *COMMANDS}
#: How many of the largest stored traces are benchmarked by default.
DEFAULT_STORED = 4

TARGET_LOAD_SPEEDUP = 5.0
TARGET_PEAK_RATIO = 3.0


# --------------------------------------------------------------------------
# workers (run in the measured subprocess, inside each tool's interpreter)
# --------------------------------------------------------------------------

def _work_kinetolens(path: str, out: dict) -> None:
    # Tuned as the `kinetolens` command is: polars' allocator options only
    # take effect before polars loads.
    import kinetolens

    kinetolens.tune_allocator()
    import polars  # noqa: F401  (imported before the clock, as pandas is for the others)
    import kinetolens.loader  # noqa: F401  (the analyzer's modules too)
    from kinetolens.analysis.gputime import idle
    from kinetolens.analysis.gputime import overview
    from kinetolens.analysis.gputime.gpu_streams import without_last_step

    out["rss_after_imports_kb"] = proc_status_kb("VmRSS")
    t0 = time.perf_counter()
    trace = kinetolens.load(path, cache=False)
    kernels, ops = trace.kernels, trace.ops
    t1 = time.perf_counter()
    steps = overview.step_breakdown(trace)
    # HTA leaves the last profiler step out by default (its
    # include_last_profiler_step=False); so do the breakdowns compared with it.
    hta_view = without_last_step(trace)
    temporal = idle.temporal_breakdown(hta_view)
    by_kernel = idle.kernel_breakdown(hta_view)
    t2 = time.perf_counter()
    out.update(load_s=t1 - t0, analysis_s=t2 - t1)
    out["rows"] = {"kernels": kernels.height, "ops": ops.height, "steps": steps.height,
                   "kernel_breakdown": by_kernel.height}
    if temporal.height:
        out["idle_pct"] = temporal["idle_pct"][0]


def _work_command(command: str, path: str, out: dict) -> None:
    """``kinetolens summary`` or ``kinetolens report`` (HTML) with an empty cache,
    in-process: the whole command (its analyses' modules imported before the
    clock, as the reference tools' are)."""
    import contextlib
    import io

    import kinetolens

    kinetolens.tune_allocator()
    import kinetolens.analysis.summary  # noqa: F401
    import kinetolens.views.report_data  # noqa: F401
    from kinetolens.cli.main import cli

    out["rss_after_imports_kb"] = proc_status_kb("VmRSS")
    with tempfile.TemporaryDirectory(prefix="compare-kl-") as tmp:
        os.environ["KINETOLENS_CACHE_DIR"] = tmp
        args = [command, path, "--json"] if command == "summary" else [command, path, "-o", os.path.join(tmp, "r.html")]
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cli.main(args, standalone_mode=False)
        t1 = time.perf_counter()
    out.update(load_s=t1 - t0, analysis_s=0.0)


def _work_hta(path: str, out: dict) -> None:
    import logging

    import pandas  # noqa: F401
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)  # per-rank progress logs
    out["rss_after_imports_kb"] = proc_status_kb("VmRSS")
    with tempfile.TemporaryDirectory(prefix="compare-hta-") as tmp:
        os.symlink(os.path.abspath(path), os.path.join(tmp, os.path.basename(path)))
        t0 = time.perf_counter()
        analysis = TraceAnalysis(trace_dir=tmp)
        t1 = time.perf_counter()
        temporal = analysis.get_temporal_breakdown(visualize=False)
        _by_type, by_kernel = analysis.get_gpu_kernel_breakdown(visualize=False)
        t2 = time.perf_counter()
    out.update(load_s=t1 - t0, analysis_s=t2 - t1)
    out["rows"] = {"events": sum(len(df) for df in analysis.t.traces.values()),
                   "kernel_breakdown": len(by_kernel)}
    if len(temporal):
        out["idle_pct"] = float(temporal["idle_time_pctg"].iloc[0])


def _work_tbp(path: str, out: dict) -> None:
    from torch_tb_profiler import io as tbp_io
    from torch_tb_profiler.profiler import RunLoader

    out["rss_after_imports_kb"] = proc_status_kb("VmRSS")
    suffix = ".pt.trace.json.gz" if path.endswith(".gz") else ".pt.trace.json"
    with tempfile.TemporaryDirectory(prefix="compare-tbp-") as tmp:
        run_dir = os.path.join(tmp, "run")
        os.mkdir(run_dir)
        os.symlink(os.path.abspath(path), os.path.join(run_dir, "worker0" + suffix))
        t0 = time.perf_counter()
        cache = tbp_io.Cache(os.path.join(tmp, "cache"))
        run = RunLoader("run", run_dir, cache).load()
        t1 = time.perf_counter()
    profiles = run.get_profiles(worker="worker0") or []
    if not profiles or profiles[0].overview is None:
        raise SystemExit("torch-tb-profiler produced no profile for the trace (parse failed)")
    profile = profiles[0]
    out.update(load_s=t1 - t0, analysis_s=0.0)
    out["rows"] = {"kernel_table": len((profile.kernel_table or {}).get("data", {}).get("rows", []))
                   if isinstance(profile.kernel_table, dict) else None,
                   "views": len(profile.views)}


def _work_tracelens(path: str, out: dict) -> None:
    from TraceLens import TreePerfAnalyzer

    out["rss_after_imports_kb"] = proc_status_kb("VmRSS")
    t0 = time.perf_counter()
    analyzer = TreePerfAnalyzer.from_file(path)
    t1 = time.perf_counter()
    timeline = analyzer.get_df_gpu_timeline()
    launchers = analyzer.get_df_kernel_launchers()
    t2 = time.perf_counter()
    out.update(load_s=t1 - t0, analysis_s=t2 - t1)
    out["rows"] = {"gpu_timeline": len(timeline), "kernel_launchers": len(launchers)}


WORKERS = {"kinetolens": _work_kinetolens, "hta": _work_hta, "tbp": _work_tbp,
           "kl-summary": lambda path, out: _work_command("summary", path, out),
           "kl-report": lambda path, out: _work_command("report", path, out),
           "tracelens": _work_tracelens}


def worker_main(tool: str, path: str) -> None:
    out: dict = {"tool": tool}
    WORKERS[tool](path, out)
    out["time_s"] = out["load_s"] + out["analysis_s"]
    out["peak_rss_kb"] = proc_status_kb("VmHWM")
    emit_result(out)


# --------------------------------------------------------------------------
# parent side
# --------------------------------------------------------------------------

def default_traces() -> list[Path]:
    """The largest stored Kineto traces plus the generated ``bench/out/gen_*mb.json``."""
    stored = [p for p in TRACES.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))
              and "golden" not in p.parts]
    stored.sort(key=lambda p: p.stat().st_size, reverse=True)
    generated = sorted(GENERATED.glob("gen_*mb.json"), key=lambda p: p.stat().st_size)
    return stored[:DEFAULT_STORED] + generated


def parse_limits(items: list[str], parser: argparse.ArgumentParser) -> dict[str, float]:
    limits: dict[str, float] = {}
    for item in items:
        tool, _, mb = item.partition("=")
        if tool not in TOOLS or not mb:
            parser.error(f"--max-size-for wants TOOL=MB with TOOL in {','.join(TOOLS)}, got {item!r}")
        try:
            limits[tool] = float(mb)
        except ValueError:
            parser.error(f"--max-size-for {item!r}: {mb!r} is not a number of MB")
    return limits


def prepare_tools(tools: list[str], args: argparse.Namespace) -> tuple[dict[str, str], dict[str, str]]:
    """Interpreter per runnable tool, and why each other tool cannot run."""
    pythons: dict[str, str] = {}
    unavailable: dict[str, str] = {}
    for tool in tools:
        if tool == "kinetolens" or tool in COMMANDS:
            ok, why = kinetolens_available(args.python)
            if ok:
                pythons[tool] = args.python
            else:
                unavailable[tool] = f"kinetolens not importable ({why})"
            continue
        if tool == "tracelens" and args.tracelens_src is None:
            unavailable[tool] = ("not installable here: AMD's TraceLens is not on PyPI (the PyPI "
                                 "'tracelens' is an unrelated project); pass --tracelens-src DIR "
                                 "with a local checkout")
            continue
        spec = VENV_SPEC.get(tool) or [str(args.tracelens_src.resolve())]
        try:
            pythons[tool] = str(ensure_venv(VENVS / tool, spec, sys.executable))
        except SystemExit as exc:  # ensure_venv explains and exits; here it only disables the tool
            unavailable[tool] = f"venv not created: {str(exc).splitlines()[0]}"
    return pythons, unavailable


def measure_all(traces: list[Path], tools: list[str], pythons: dict[str, str],
                unavailable: dict[str, str], limits: dict[str, float],
                args: argparse.Namespace) -> dict:
    """Run every tool on every trace, ``args.repeat`` times, interleaved per repetition."""
    results: dict = {}
    gave_up: dict[str, str] = {}  # tool -> why it is not run on larger traces
    for path in sorted(traces, key=uncompressed_size):
        json_bytes = uncompressed_size(path)
        info: dict = {"file_bytes": path.stat().st_size, "json_bytes": json_bytes, "tools": {}}
        runs: dict[str, list[dict]] = {t: [] for t in tools}
        status: dict[str, str] = {}
        for tool in tools:
            if tool in unavailable:
                status[tool] = f"not run: {unavailable[tool]}"
            elif tool in limits and json_bytes / MB > limits[tool]:
                status[tool] = (f"skipped: {json_bytes / MB:.0f} MiB JSON is over "
                                f"--max-size-for {tool}={limits[tool]:g}")
            elif tool in gave_up:
                status[tool] = f"not run: {gave_up[tool]}"
        for i in range(args.repeat):
            for tool in tools:
                if tool in status:
                    continue
                label = f"{tool} on {path.name}"
                cmd = [pythons[tool], str(Path(__file__).resolve()), "--_worker", tool,
                       "--_path", str(path)]
                try:
                    r = run_measured(cmd, label, args.timeout, int(args.mem_cap_gib * GIB))
                except WorkerFailed as exc:
                    status[tool] = did_not_finish(exc, args)
                    if exc.kind in ("timeout", "oom"):
                        gave_up[tool] = f"did not finish on the smaller {path.name}"
                    print(f"[{path.name} #{i + 1}] {tool:10s} {status[tool]}", file=sys.stderr, flush=True)
                    if exc.kind == "error":
                        print(str(exc), file=sys.stderr)
                    continue
                runs[tool].append(r)
                print(f"[{path.name} #{i + 1}/{args.repeat}] {tool:10s} load {r['load_s']:8.2f} s  "
                      f"analysis {r['analysis_s']:7.2f} s  peak {r['peak_kb'] / 1024:7.0f} MiB  "
                      f"rows {r.get('rows')}", file=sys.stderr, flush=True)
        for tool in tools:
            if runs[tool] and tool not in status:
                info["tools"][tool] = summarize(runs[tool])
            else:
                info["tools"][tool] = {"status": status.get(tool, "no result")}
        add_ratios(info["tools"])
        results[str(path)] = info
        results[str(path)]["runs"] = runs
    return results


def did_not_finish(exc: WorkerFailed, args: argparse.Namespace) -> str:
    if exc.kind == "timeout":
        return f"did not finish (timeout at {args.timeout:g} s)"
    if exc.kind == "oom":
        return f"did not finish (OOM at {exc.peak_kb / MB:.1f} GiB)"
    return f"failed: {str(exc).splitlines()[0]}"


def summarize(runs: list[dict]) -> dict:
    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    return {
        "status": "ok",
        "n": len(runs),
        "load_s": med("load_s"),
        "analysis_s": med("analysis_s"),
        "time_s": med("time_s"),
        "peak_mb": med("peak_kb") / 1024,
        "tree_peak_mb": med("tree_peak_kb") / 1024,
        "rss_after_imports_mb": med("rss_after_imports_kb") / 1024,
        "idle_pct": runs[-1].get("idle_pct"),
        "rows": runs[-1].get("rows"),
    }


def add_ratios(tools: dict) -> None:
    """Their / ours for time and peak; tb-profiler's load is compared with our load + analysis."""
    ours = tools.get("kinetolens", {})
    if ours.get("status") != "ok":
        return
    for tool, s in tools.items():
        if tool == "kinetolens" or tool in COMMANDS or s.get("status") != "ok":
            continue
        ours_load = ours["time_s"] if tool in ANALYSIS_IN_LOAD else ours["load_s"]
        s["load_ratio"] = s["load_s"] / ours_load
        s["analysis_ratio"] = (None if tool in ANALYSIS_IN_LOAD or not ours["analysis_s"]
                               else s["analysis_s"] / ours["analysis_s"])
        s["total_ratio"] = s["time_s"] / ours["time_s"]
        s["peak_ratio"] = s["peak_mb"] / ours["peak_mb"]


def _trace_name(path: str) -> str:
    p = Path(path)
    for root in (TRACES, REPO):
        if p.is_relative_to(root):
            return str(p.relative_to(root))
    return str(p)


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}x"


def fmt_table(results: dict, tools: list[str], meta: dict) -> str:
    shown = [t for t in tools if t not in meta["unavailable"]]
    lines = [
        ("| trace (JSON MiB) | tool | load s | analysis s | total s | peak RSS MiB (after imports) "
        "| load: theirs / ours | analysis: theirs / ours | total: theirs / ours | peak: theirs / ours "
        "| idle % |"),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for path, info in results.items():
        head = f"`{_trace_name(path)}` ({info['json_bytes'] / MB:.0f})"
        for tool in (t for t in shown if t not in COMMANDS):
            s = info["tools"][tool]
            if s.get("status") != "ok":
                lines.append(f"| {head} | {LABEL[tool]} | {s['status']} | | | | | | | | |")
                continue
            analysis = "in load" if tool in ANALYSIS_IN_LOAD else f"{s['analysis_s']:.2f}"
            idle = "—" if s.get("idle_pct") is None else f"{s['idle_pct']:.1f}"
            lines.append(
                f"| {head} | {LABEL[tool]} | {s['load_s']:.2f} | {analysis} | {s['time_s']:.2f} "
                f"| {s['peak_mb']:.0f} ({s['rss_after_imports_mb']:.0f}) | {_x(s.get('load_ratio'))} "
                f"| {_x(s.get('analysis_ratio'))} | {_x(s.get('total_ratio'))} | {_x(s.get('peak_ratio'))} "
                f"| {idle} |"
            )
    footer = (f"_n = {meta['n']} run(s) per cell, medians; {meta['date']}, Python {meta['python']}, "
              f"{meta['cpus']} CPUs; kinetolens {meta['kinetolens']} (`{meta['git']}`), "
              f"polars {meta['polars']}; {meta['versions']}; timeout {meta['timeout_s']:.0f} s, "
              f"memory cap {meta['mem_cap_gib']:g} GiB._")
    commands = fmt_commands(results, shown)
    lines += ["", *targets(results, shown),
              *(f"- {LABEL[t]}: {why}" for t, why in meta["unavailable"].items()), "",
              *(["The commands end to end, an empty cache:", "", commands, ""] if commands else []), footer]
    return "\n".join(lines)


def fmt_commands(results: dict, tools: list[str]) -> str:
    """kinetolens' commands against the load + step breakdown (target: at most
    1.3x its time and peak) and against each reference tool's load + analysis
    (theirs / ours: > 1x means the command is faster or smaller)."""
    commands = [t for t in COMMANDS if t in tools]
    refs = [t for t in ("hta", "tbp") if t in tools]
    if not commands:
        return ""
    head = ["trace (JSON MiB)", "command", "total s", "peak MiB", "time / load + breakdown", "peak / load + breakdown"]
    head += [f"{LABEL[r]}: theirs / ours (time, peak)" for r in refs]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for path, info in results.items():
        base = info["tools"].get("kinetolens", {})
        for command in commands:
            s = info["tools"][command]
            if s.get("status") != "ok":
                lines.append(f"| `{_trace_name(path)}` | {LABEL[command]} | {s['status']} |" + " |" * (len(head) - 3))
                continue
            row = [f"`{_trace_name(path)}` ({info['json_bytes'] / MB:.0f})", LABEL[command], f"{s['time_s']:.2f}", f"{s['peak_mb']:.0f}"]
            ok = base.get("status") == "ok"
            row += [f"{s['time_s'] / base['time_s']:.2f}x" if ok else "—", f"{s['peak_mb'] / base['peak_mb']:.2f}x" if ok else "—"]
            for r in refs:
                theirs = info["tools"].get(r, {})
                row.append(f"{theirs['time_s'] / s['time_s']:.1f}x, {theirs['peak_mb'] / s['peak_mb']:.1f}x"
                           if theirs.get("status") == "ok" else "—")
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def targets(results: dict, tools: list[str]) -> list[str]:
    """One line per reference tool: the issue's targets, met or not, trace by trace."""
    out = []
    for tool in tools:
        if tool == "kinetolens" or tool in COMMANDS:
            continue
        load_ok, peak_ok, big_ok, notes = True, True, True, []
        for path, info in results.items():
            s, ours = info["tools"][tool], info["tools"].get("kinetolens", {})
            name = Path(path).name
            if s.get("status") == "ok" and "load_ratio" in s:
                load_ok &= s["load_ratio"] >= TARGET_LOAD_SPEEDUP
                peak_ok &= s["peak_ratio"] >= TARGET_PEAK_RATIO
                notes.append(f"{name} {s['load_ratio']:.1f}x / {s['peak_ratio']:.1f}x")
            elif s.get("status", "").startswith("did not finish"):
                big_ok &= ours.get("status") == "ok"
                notes.append(f"{name}: {LABEL[tool]} {s['status']}, kinetolens "
                             f"{'loaded it' if ours.get('status') == 'ok' else 'did not either'}")
        if not notes:
            continue
        verdict = ("met" if load_ok and peak_ok and big_ok else "NOT met")
        out.append(f"- vs {LABEL[tool]} (≥ {TARGET_LOAD_SPEEDUP:.0f}x faster load, "
                   f"≥ {TARGET_PEAK_RATIO:.0f}x less peak memory, and loads what it cannot): "
                   f"**{verdict}** — {'; '.join(notes)}")
    return out


def _meta(args: argparse.Namespace, pythons: dict[str, str], unavailable: dict[str, str]) -> dict:
    versions = []
    if "hta" in pythons:
        versions.append(f"HTA {package_version(pythons['hta'], 'HolisticTraceAnalysis')} / pandas "
                        f"{package_version(pythons['hta'], 'pandas')}")
    if "tbp" in pythons:
        versions.append(f"torch-tb-profiler {package_version(pythons['tbp'], 'torch-tb-profiler')} / "
                        f"pandas {package_version(pythons['tbp'], 'pandas')}")
    if "tracelens" in pythons:
        versions.append(f"TraceLens {package_version(pythons['tracelens'], 'TraceLens')}")
    return {
        "n": args.repeat,
        "date": time.strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "git": git_revision(),
        "kinetolens": package_version(args.python, "kinetolens"),
        "polars": query_python(args.python, "import polars; print(polars.__version__)"),
        "versions": ", ".join(versions) or "no reference tool run",
        "timeout_s": args.timeout,
        "mem_cap_gib": args.mem_cap_gib,
        "unavailable": unavailable,
    }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", nargs="+", type=Path,
                    help=f"traces to run (default: the {DEFAULT_STORED} largest Kineto JSON files under "
                         f"{TRACES} plus bench/out/gen_*mb.json)")
    ap.add_argument("--max-trace-mb", type=float, metavar="MB",
                    help="leave out traces whose uncompressed JSON is over MB MiB (for every tool)")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated subset of {','.join(TOOLS)}")
    ap.add_argument("-n", "--repeat", type=int, default=1, help="runs per measurement (median reported)")
    ap.add_argument("--max-size-for", action="append", default=[], metavar="TOOL=MB",
                    help="skip TOOL on traces whose uncompressed JSON is over MB MiB (repeatable)")
    ap.add_argument("--timeout", type=float, default=900, help="per-run wall-clock limit, s")
    ap.add_argument("--mem-cap-gib", type=float, default=16,
                    help="per-run cap on the summed RSS of the run's processes, GiB")
    ap.add_argument("--tracelens-src", type=Path, metavar="DIR",
                    help="local TraceLens checkout to pip-install into bench/.venvs/tracelens")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter that has kinetolens installed (default: this one)")
    ap.add_argument("--write", action="store_true", help=f"write the table into {DOC.relative_to(REPO)}")
    ap.add_argument("--json", type=Path, help="also write every run's raw numbers here")
    ap.add_argument("--_worker", choices=TOOLS, help=argparse.SUPPRESS)
    ap.add_argument("--_path", help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args._worker:
        worker_main(args._worker, args._path)
        return 0

    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown:
        ap.error(f"unknown tools {unknown}; choose from {','.join(TOOLS)}")
    tools = [t for t in TOOLS if t in tools]
    limits = parse_limits(args.max_size_for, ap)
    traces = [p.resolve() for p in (args.traces or default_traces())]
    for p in traces:
        if not p.is_file():
            ap.error(f"no such trace: {p}")
    if args.max_trace_mb is not None:
        traces = [p for p in traces if uncompressed_size(p) / MB <= args.max_trace_mb]

    pythons, unavailable = prepare_tools(tools, args)
    for tool, why in unavailable.items():
        print(f"[{tool}] {why}", file=sys.stderr)
    results = measure_all(traces, tools, pythons, unavailable, limits, args)
    meta = _meta(args, pythons, unavailable)
    table = fmt_table(results, tools, meta)
    print(table)
    cmd_args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--write"]
    command = " ".join(["python3", "bench/compare.py", *cmd_args])
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "command": command, "results": results}, indent=1))
    if args.write:
        replace_doc_block(DOC, MARK_START, MARK_END, f"Command: `{command}`\n\n{table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
