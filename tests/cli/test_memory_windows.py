"""``kinetolens memory`` of a trace read a step window at a time.

From 1.5 GB of JSON (or with ``--windows``) each window gives its own
allocator events (those starting in it) with their enclosing ops, found in
the window, which holds every range overlapping it, and its sums of the op
memory table (its own calls) (:func:`kinetolens.runs.windowed_read.memory_in_windows`);
the peaks, the allocations and their leaks, the curve and the picture are
then made from all the events as for a trace held whole.  Everything is the
whole read's but the op ids, which are each window's own, made unique in
the trace.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.same_rows import invoked
from tests.conftest import QWEN_H100, trace_path

DF_INDEX = "hta/df_index_resolver/df_index_resolver.json.gz"  # 5 steps, 28,010 events on 2 GPUs and the CPU
RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"  # 6 steps
#: A rank of the 8-rank NCCL job: one step, no allocator events.
DLRM_RANK = "param/dlrm_kineto/worker1_step_12.1694128201556.pt.trace.json.gz"


def _doc(path: Path, *options: str) -> dict:
    code, out, err = invoked("memory", path, "--json", *options)
    assert code == 0, err
    return json.loads(out)


def _without_op_ids(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_op_ids(v) for k, v in value.items() if not k.endswith("op_id")}
    if isinstance(value, list):
        return [_without_op_ids(v) for v in value]
    return value


def _same_both_ways(path: Path, *options: str) -> dict:
    whole = _doc(path, "--whole", *options)
    windows = _doc(path, "--windows", *options)
    assert _without_op_ids(windows) == _without_op_ids(whole)
    # a window's op ids name one op each across the whole trace
    named: dict[int, str] = {}
    for row in windows["allocations"]:
        for key, op in (("op_id", "op"), ("free_op_id", "free_op")):
            if row[key] is not None:
                assert named.setdefault(row[key], row[op]) == row[op]
    return whole


@pytest.mark.parametrize("rel", [DF_INDEX, RESNET, QWEN_H100])
def test_a_trace_of_steps_gives_the_whole_read(rel: str) -> None:
    whole = _same_both_ways(trace_path(rel))
    assert whole["op_stats"] and whole["curve"]
    assert bool(whole["allocations"]) == whole["pairable"]  # resnet50's events carry no addresses


def test_five_windows_of_a_gpu_trace_give_the_whole_read(qwen_steps: Path) -> None:
    whole = _same_both_ways(qwen_steps)
    one = _doc(trace_path(QWEN_H100), "--whole")
    assert len(whole["curve"]) == 5 * len(one["curve"])  # every window's events, each once


def test_one_device_is_the_same_both_ways() -> None:
    whole = _same_both_ways(trace_path(DF_INDEX), "--device", "GPU1")
    assert {r["device"] for r in whole["op_stats"]} == {"GPU1"}


def test_allocations_are_in_time_order() -> None:
    # The file interleaves its devices' events out of time order; the table
    # is in allocation time order however it is read.
    rows = _doc(trace_path(DF_INDEX), "--whole")["allocations"]
    at = [r["alloc_ts"] if r["alloc_ts"] is not None else r["free_ts"] for r in rows]
    assert at == sorted(at)


def test_the_picture_is_the_same_both_ways(tmp_path: Path) -> None:
    for how in ("--whole", "--windows"):
        code, _, err = invoked("memory", trace_path(DF_INDEX), how, "--svg", str(tmp_path / f"{how[2:]}.svg"))
        assert code == 0, err
    assert (tmp_path / "windows.svg").read_text() == (tmp_path / "whole.svg").read_text()


@pytest.mark.parametrize("rel", [DF_INDEX, QWEN_H100])
def test_a_trace_split_anywhere_adds_up_to_the_whole_op_table(rel: str) -> None:
    # A window owns the events and the op calls that start in it; its events'
    # enclosing ops are in it.  One trace cut in two at three instants: a part
    # that counted what it does not own (an event, a call) would count it twice.
    import kinetolens
    import polars as pl

    from kinetolens.analysis.memory.usage import memory_events, merged_op_memory_stats, op_memory_part, op_memory_stats
    from kinetolens.model.ownership import starts_in

    trace = kinetolens.load(trace_path(rel), cache=False)
    events = memory_events(trace)
    whole = op_memory_stats(events, trace.ops)
    lo, hi = int(min(events["ts"].min(), trace.ops["ts"].min())), int(events["ts"].max()) + 1  # type: ignore[type-var, arg-type]
    for cut in (int(events["ts"][events.height // 3]), int(events["ts"][events.height // 2]) + 1, int(trace.steps["ts"][0]) + 1):
        parts = [op_memory_part(events.filter(starts_in(own)), trace.ops, own) for own in ((lo, cut), (cut, hi))]
        halves = merged_op_memory_stats(parts)
        key = ["device", "op"]
        assert halves.sort(key).equals(whole.sort(key).cast(halves.schema))  # type: ignore[arg-type]
        assert halves.select(pl.col("calls").sum()).item() == whole.select(pl.col("calls").sum()).item()


def test_the_terminal_says_how_it_was_read() -> None:
    path = trace_path(DF_INDEX)
    code, out, err = invoked("memory", path, "--windows")
    assert code == 0, err
    assert out.rstrip().endswith("read a step window at a time (5 steps)")
    code, whole, _ = invoked("memory", path, "--whole")
    assert out.rstrip().removesuffix("read a step window at a time (5 steps)").rstrip() == whole.rstrip()


def test_a_trace_without_allocator_events_is_one_line_of_error_read_either_way() -> None:
    for how in ("--windows", "--whole"):
        proc = subprocess.run(
            [sys.executable, "-m", "kinetolens.cli.main", "memory", str(trace_path(DLRM_RANK)), "--no-cache", how],
            capture_output=True, text=True,
        )  # fmt: skip
        assert proc.returncode == 2, (how, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "has no [memory] events" in proc.stderr, (how, proc.stderr)


def test_a_trace_with_memory_samples_is_read_whole_and_says_why(tmp_path: Path) -> None:
    from tests.cpu_capture import capture_script

    script = """
import sys, torch, kinetolens
with kinetolens.profile(logdir=sys.argv[1], run="sampled", steps=2, warmup=0, sample_rate=4) as prof:
    for _ in range(3):
        torch.randn(256, 256).matmul(torch.randn(256, 256)).sum()
        prof.step()
print(prof.trace_files[0])
"""
    path = capture_script(script, tmp_path)[0]
    code, out, err = invoked("memory", path, "--windows", "--json")
    assert code == 0, err
    assert "memory samples" in err and "whole" in err
    doc = json.loads(out)
    assert doc["samples"] and doc == _doc(path, "--whole")
