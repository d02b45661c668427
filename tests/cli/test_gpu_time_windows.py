"""``kinetolens idle`` and ``kinetolens launches`` of a trace read a step window at a time.

From 1.5 GB of JSON (or with ``--windows``) their tables are computed from
the GPU work alone, a few columns per activity, gathered window by window
(each window's own activities: those launched in it, so a launch call's
activities are all in one) and put in start order
(:func:`kinetolens.runs.windowed_read.work_in_windows`); the rest of
the trace is never held whole.  Every table is the whole read's, byte for
byte in JSON: the union of busy time, each stream's gaps and their causes
and quartiles, the overlap of communication and compute; each launch call's
cost and delay, launch-bound kernels, graph launches, queue depth and copy
bandwidth.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.same_rows import invoked
from tests.conftest import QWEN_H100, trace_path

QWEN_MI300 = "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
#: A rank of the 8-rank NCCL job: communication kernels overlapping compute.
DLRM_RANK = "param/dlrm_kineto/worker1_step_12.1694128201556.pt.trace.json.gz"
NO_STEPS = "tracelens/b200/eager_trace.json.gz"


COMMANDS = ("idle", "launches")


def _tables(path: Path, *options: str, command: str = "idle") -> dict:
    code, out, err = invoked(command, path, "--json", *options)
    assert code == 0, err
    return json.loads(out)


def _same_both_ways(path: Path, *options: str, command: str = "idle") -> dict:
    whole = _tables(path, "--whole", *options, command=command)
    assert _tables(path, "--windows", *options, command=command) == whole
    return whole


def test_five_steps_give_the_whole_tables(qwen_steps: Path) -> None:
    # Five windows: an activity counted in two windows (or in none) would change
    # the busy time, a stream's gaps and their counts, the launches and their queue.
    launches = _same_both_ways(qwen_steps, command="launches")
    assert launches["launch_summary"][0]["count"] == 5 * _tables(trace_path(QWEN_H100), "--whole", command="launches")["launch_summary"][0]["count"]
    whole = _same_both_ways(qwen_steps)
    one = _tables(trace_path(QWEN_H100), "--whole")
    gaps = {(r["idle_category"]): r["count"] for r in whole["idle_gap_stats"]}
    one_step = {(r["idle_category"]): r["count"] for r in one["idle_gap_stats"]}
    assert gaps["kernel_wait"] > 3 * one_step["kernel_wait"]  # five steps' gaps, not one window's


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("rel", [QWEN_H100, QWEN_MI300, DLRM_RANK, "hta/df_index_resolver/df_index_resolver.json.gz"])
def test_one_step_traces_give_the_whole_tables(rel: str, command: str) -> None:
    whole = _same_both_ways(trace_path(rel), command=command)
    if rel == DLRM_RANK and command == "idle":
        assert whole["comm_comp_overlap"][0]["comm_us"] > 0  # the overlap of two kernel types is merged too
    if command == "launches":
        assert whole["queue_length"] and whole["short_kernels"]


@pytest.fixture(scope="module")
def cut_last_step(qwen_steps: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The five Qwen steps with the profiler stopped early in the last one:
    the events that start after its first fifth are gone."""
    trace = json.loads(qwen_steps.read_bytes())
    events = trace["traceEvents"]
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    stop = steps[-1]["ts"] + steps[-1]["dur"] / 5
    trace["traceEvents"] = [e for e in events if e.get("ph") == "M" or e is steps[-1] or float(e.get("ts", 0)) < stop]
    out = tmp_path_factory.mktemp("cut_last_step") / "cut.json"
    out.write_text(json.dumps(trace))
    return out


def test_a_cut_last_step_is_left_out_unless_kept(cut_last_step: Path) -> None:
    dropped = _same_both_ways(cut_last_step)
    kept = _same_both_ways(cut_last_step, "--keep-last-step")
    span = lambda tables: tables["temporal_breakdown"][0]["kernel_span_us"]  # noqa: E731
    assert span(kept) > span(dropped)  # the cut step's kernels are in one and not the other
    dropped = _same_both_ways(cut_last_step, command="launches")
    kept = _same_both_ways(cut_last_step, "--keep-last-step", command="launches")
    calls = lambda tables: tables["launch_summary"][0]["count"]  # noqa: E731
    assert calls(kept) > calls(dropped)


@pytest.mark.parametrize("rel", [QWEN_H100, DLRM_RANK])
def test_a_window_split_anywhere_adds_up_to_the_whole_work(rel: str) -> None:
    # Windows share the instants at their edges, and a step's late kernels run
    # into the next one's window: each part must hold only the activities it
    # owns (by their launch).  One trace cut in two at three instants: a part
    # that held what it does not own would hold it twice.
    import kinetolens
    import polars as pl

    from kinetolens.analysis.gputime.idle import idle_tables, idle_work

    trace = kinetolens.load(trace_path(rel), cache=False)
    whole = idle_work(trace)
    launches = trace.kernels["launch_ts"].drop_nulls().sort()
    lo = int(min(trace.kernels["ts"].min(), trace.ops["ts"].min()))  # type: ignore[type-var]
    hi = int(whole["end"].max()) + 1  # type: ignore[arg-type]
    for cut in (int(launches[launches.len() // 3]), int(launches[launches.len() // 2]) + 1, int(trace.steps["ts"][0]) + 1):
        halves = pl.concat([idle_work(trace, own) for own in ((lo, cut), (cut, hi))]).sort("ts", maintain_order=True)
        assert halves.sort(halves.columns).equals(whole.sort(whole.columns))
        for name, table in idle_tables(halves, 0).items():
            assert table.equals(idle_tables(whole, 0)[name]), name


@pytest.mark.parametrize("rel", [QWEN_H100, DLRM_RANK])
def test_launches_split_anywhere_add_up_to_the_whole_tables(rel: str) -> None:
    # As above, for the launch tables: each part holds its own launch calls'
    # activities, and numbers its launches itself (made unique in the trace).
    import kinetolens
    import polars as pl

    from kinetolens.analysis.gputime.launch import launch_tables, launch_work, launch_work_part

    trace = kinetolens.load(trace_path(rel), cache=False)
    whole = launch_tables(launch_work(trace))
    launches = trace.kernels["launch_ts"].drop_nulls().sort()
    lo = int(min(trace.kernels["ts"].min(), trace.ops["ts"].min()))  # type: ignore[type-var]
    hi = int((trace.kernels["ts"] + trace.kernels["dur"]).max()) + 1  # type: ignore[arg-type]
    for cut in (int(launches[launches.len() // 3]), int(launches[launches.len() // 2]) + 1, int(trace.steps["ts"][0]) + 1):
        parts = [launch_work_part(trace, own, i) for i, own in enumerate(((lo, cut), (cut, hi)))]
        halves = launch_tables(pl.concat(parts).sort("ts", maintain_order=True))
        for name, table in whole.items():
            assert halves[name].equals(table), name


@pytest.mark.parametrize("command", COMMANDS)
def test_the_terminal_says_how_it_was_read(qwen_steps: Path, command: str) -> None:
    code, out, err = invoked(command, qwen_steps, "--windows")
    assert code == 0, err
    assert out.rstrip().endswith("read a step window at a time (5 steps)")
    code, whole, _ = invoked(command, qwen_steps, "--whole")
    assert out.rstrip().removesuffix("read a step window at a time (5 steps)").rstrip() == whole.rstrip()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_trace_without_steps_is_read_whole_and_says_why(command: str) -> None:
    code, out, err = invoked(command, trace_path(NO_STEPS), "--windows", "--json")
    assert code == 0
    assert "ProfilerStep" in err and "whole" in err
    assert json.loads(out) == _tables(trace_path(NO_STEPS), "--whole", command=command)


def test_a_trace_without_gpu_work_is_one_line_of_error_read_either_way(tmp_path: Path) -> None:
    from tests.cpu_capture import capture_script

    script = """
import sys, torch, kinetolens
with kinetolens.profile(logdir=sys.argv[1], run="cpu", steps=2, warmup=0, profile_memory=False) as prof:
    for _ in range(3):
        torch.randn(64, 64).matmul(torch.randn(64, 64)).sum()
        prof.step()
print(prof.trace_files[0])
"""
    path = capture_script(script, tmp_path)[0]
    for command in COMMANDS:
        for how in ("--windows", "--whole"):
            proc = subprocess.run([sys.executable, "-m", "kinetolens.cli.main", command, str(path), "--no-cache", how], capture_output=True, text=True)
            assert proc.returncode == 2, (command, how, proc.stderr)
            assert proc.stderr.count("\n") == 1 and "has no GPU kernels" in proc.stderr, (command, how, proc.stderr)
