"""``kinetolens critical-path`` as a user runs it, in a real subprocess."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from kinetolens.views.units import duration
from tests.conftest import trace_path

EVENT_SYNC = str(trace_path("hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"))
ALEXNET = str(trace_path("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"))
PARAM = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"


def _run(args: list[str], columns: int = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS=str(columns), POLARS_MAX_THREADS="1")
    return subprocess.run([sys.executable, "-m", "kinetolens.cli.main", "critical-path", *args], capture_output=True, text=True, timeout=300, env=env)


def test_json_has_the_path_in_order() -> None:
    # --json carries the length, the bound-by split and the path's edges in order.
    out = _run([ALEXNET, "--annotation", PARAM, "--instance", "1", "--json"])
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["length_us"] == 35834.0  # HTA 0.5.0's length for this window
    (path,) = data["paths"]
    assert [e["order"] for e in path["path"]] == list(range(len(path["path"])))
    assert sum(e["us"] for e in path["path"]) == data["length_us"]
    assert {r["bound_by"] for r in data["summary"]} >= {"cpu", "gpu_compute", "kernel_gap", "launch_overhead"}
    assert data["top"]["name"][0]["name"] == "cudaMalloc"  # regression pin: 31.5 ms of the 35.8 ms


def test_terminal_fits_80_columns() -> None:
    # one small summary table, then the top items, numbers with units.
    for columns in (80, 120):
        out = _run([EVENT_SYNC, "--step", "100"], columns)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert max(len(line.rstrip()) for line in lines) <= columns
        assert lines[0] == "Critical path of ProfilerStep#100"
        # HTA's length, 2401 us; the span adds 176 us between top-level ops (regression pin)
        assert lines[1] == f"length {duration(2401)}, span {duration(2577)} ({duration(176)} untraced between ops)"
        assert "CPU ops" in out.stdout and "97.3%" in out.stdout


def test_window_parts_the_path_does_not_reach_are_named() -> None:
    # HTA's sampled DLRM rank 0: the path of step 551 starts 2.3 ms into the 607 ms window and
    # ends 51.9 ms before its work does; the text names both and the JSON's parts add up.
    sampled = str(trace_path("hta/trace_filter/sampled_rank-0.json.gz"))
    out = _run([sampled, "--step", "551"], 80)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[2] == f"window {duration(607_312)}: {duration(2_305)} before the path, {duration(51_892)} after it"
    data = json.loads(_run([sampled, "--step", "551", "--json"]).stdout)
    (p,) = data["paths"]
    assert (p["before_us"], p["untraced_us"], p["after_us"], p["window_us"]) == (2_305.0, 215_222.0, 51_892.0, 607_312.0)
    assert p["before_us"] + p["length_us"] + p["untraced_us"] + p["after_us"] == p["window_us"]


def test_bad_window_is_one_line() -> None:
    # a step or annotation the trace lacks: one line naming it, exit 2.
    for args, words in (
        ([EVENT_SYNC, "--step", "3"], ["no step 3"]),
        ([EVENT_SYNC, "--annotation", "nope"], ["'nope'"]),
        ([EVENT_SYNC, "--step", "100", "--annotation", "ProfilerStep"], ["--step or --annotation"]),
        ([EVENT_SYNC, "--instance", "2"], ["--instance", "--annotation"]),
        # a step of gloo annotations only: nothing to build a path from
        ([str(trace_path("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"))], ["no CPU ops or runtime calls"]),
    ):
        out = _run(args)
        assert out.returncode == 2 and out.stdout == ""
        assert len(out.stderr.strip().splitlines()) == 1 and all(w in out.stderr for w in words), out.stderr


def test_perfetto_track_of_the_path(tmp_path) -> None:
    # the Perfetto overlay: the trace plus a "critical path" track whose
    # slices are the path's stretches, at their times, summing to its length.
    out_file = tmp_path / "cp" / "trace.json.gz"
    out = _run([ALEXNET, "--annotation", PARAM, "--instance", "1", "--perfetto", str(out_file)])
    assert out.returncode == 0, out.stderr
    assert "critical path" in out.stderr and out.stdout.startswith("Critical path of")
    events = json.loads(gzip.decompress(out_file.read_bytes()))["traceEvents"]
    track = [e for e in events if e.get("cat") == "critical_path"]
    assert sum(e["dur"] for e in track) == pytest.approx(35834.0)  # HTA's length
    starts = sorted((e["ts"], e["dur"]) for e in track)
    # one lane, no overlap (0.25 us is the resolution of a float64 epoch time in us)
    assert all(a + d <= b + 0.5 for (a, d), (b, _) in zip(starts, starts[1:]))
    assert {e["args"]["bound_by"] for e in track} >= {"cpu", "gpu_compute"}
    # the trace itself is there: 79 kernels, 16 memcpy and 3 memset
    assert sum(1 for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")) == 98
