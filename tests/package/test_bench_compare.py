"""The side-by-side benchmark measures what it claims to measure.

``bench/compare.py`` compares kinetolens with tools that start helper
processes, so its memory number must cover the whole process tree, and a tool
that runs away must be stopped by the memory cap.  Both are checked here with
real processes; the kinetolens worker is checked on a real trace against the
library's own answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import kinetolens
from kinetolens.analysis.gputime import idle
from kinetolens.analysis.gputime.gpu_streams import without_last_step
from tests.conftest import trace_path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from bench_common import RESULT_TAG, WorkerFailed, run_measured

SMALL = "hta/trace_filter/sampled_rank-0.json.gz"
MB = 1024 * 1024


def _tree_worker(pidfile: Path, child_mb: int) -> list[str]:
    """A worker that stays small itself while a child it waits for holds ``child_mb`` MiB."""
    code = textwrap.dedent(f"""
        import json, subprocess, sys
        child = subprocess.Popen([sys.executable, "-c",
            "import time; b = bytearray({child_mb} * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); "
            "time.sleep(1.0)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        child.wait()
        hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
        print({RESULT_TAG!r} + json.dumps({{"peak_rss_kb": hwm}}))
    """)
    return [sys.executable, "-c", code]


def test_peak_covers_children_the_worker_spawns(tmp_path: Path) -> None:
    r = run_measured(_tree_worker(tmp_path / "pid", 300), "tree", timeout=60)
    # The worker's own high-water mark misses the child; the sampled tree does not.
    assert r["peak_rss_kb"] < 100 * 1024
    assert r["tree_peak_kb"] > 290 * 1024
    assert r["peak_kb"] == max(r["peak_rss_kb"], r["ru_maxrss_kb"], r["tree_peak_kb"])


def test_memory_cap_kills_the_whole_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with pytest.raises(WorkerFailed) as failed:
        run_measured(_tree_worker(pidfile, 400), "tree", timeout=60, mem_cap_bytes=200 * MB)
    assert failed.value.kind == "oom"
    assert failed.value.peak_kb > 200 * 1024
    child = int(pidfile.read_text())
    # Killed, not left running (a zombie awaiting its reaper is dead too).  A
    # killed process takes a moment to exit on a busy machine: wait for it,
    # up to a bound that only a process left running reaches.
    deadline = time.monotonic() + 30
    while (state := _proc_state(child)) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state in (None, "Z"), f"the tree's child is still {state!r} 30 s after the kill"


def _proc_state(pid: int) -> str | None:
    """The state letter of ``pid`` in /proc (R, S, D, Z, ...), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def test_kinetolens_worker_reports_the_library_answers() -> None:
    path = trace_path(SMALL)
    proc = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), "--_worker", "kinetolens", "--_path", str(path)],
        capture_output=True, text=True, check=True, timeout=120, env={**os.environ, "PYTHONPATH": ""},
    )
    out = json.loads(proc.stdout.rsplit(RESULT_TAG, 1)[1])
    trace = kinetolens.load(path, cache=False)
    assert out["tool"] == "kinetolens"
    assert out["load_s"] > 0 and out["analysis_s"] > 0
    assert out["time_s"] == pytest.approx(out["load_s"] + out["analysis_s"])
    assert out["rows"]["kernels"] == trace.kernels.height == 1204
    assert out["rows"]["ops"] == trace.ops.height
    # Compared with HTA, whose default leaves the last profiler step out.
    hta_view = without_last_step(trace)
    assert out["rows"]["kernel_breakdown"] == idle.kernel_breakdown(hta_view).height
    assert out["idle_pct"] == idle.temporal_breakdown(hta_view)["idle_pct"][0]
    assert out["idle_pct"] != idle.temporal_breakdown(trace)["idle_pct"][0]  # the last step matters here
    # Peak memory includes the imports, so it cannot be below RSS after them.
    assert out["peak_rss_kb"] >= out["rss_after_imports_kb"] > 0


def test_scale_bench_worker_runs_on_a_real_trace() -> None:
    # it indexed the summary as a dict, and stopped running when the summary became typed
    import scale_bench

    path = trace_path("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    env = dict(os.environ, PYTHONPATH=str(BENCH.parent / "src"))
    out = subprocess.run([sys.executable, "-c", scale_bench.WORKER, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    trace = kinetolens.load(path, cache=False)
    assert (got["ops"], got["kernels"]) == (trace.ops.height, trace.kernels.height)
    assert 0.0 < got["op_attributed"] <= 1.0 and got["cpu_s"] > 0
