"""``kinetolens kernels`` of a trace read a step window at a time.

From 1.5 GB of JSON (or with ``--windows``) the per-kernel table is built
one step window at a time, each window's own kernels (those launched in it)
written as they come (:func:`kinetolens.runs.windowed_read.kernels_in_windows`),
so memory holds a step: the rows, in every format, are the whole trace's,
byte for byte.  A trace whose CUDA graph replays kinetolens numbers itself
is read whole (a window's numbers would not be the trace's).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kinetolens.analysis.hardware.kernel_columns import KERNEL_COLUMNS
from kinetolens.cli.main import cli
from tests.cli.kinetolens_process import kinetolens
from tests.conftest import trace_path

DF_INDEX = "hta/df_index_resolver/df_index_resolver.json.gz"
CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
NO_STEPS = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
#: CUDA graph replays without recorded graph ids, and kernels launched late in
#: a step that start after the next step's first kernel (79 of them).
GRAPHS = "hta/trace_diff/test/test.json.gz"
EVERY_COLUMN = ",".join(KERNEL_COLUMNS)


def _kernels(path: Path, *options: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["kernels", str(path), "--no-cache", *options], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _same_both_ways(path: Path, *options: str) -> str:
    """The output read whole and in windows (it must be the same); the windowed read's stderr."""
    code, whole, _ = _kernels(path, "--whole", *options)
    assert code == 0
    code, windows, err = _kernels(path, "--windows", *options)
    assert code == 0, err
    assert windows == whole
    return err


@pytest.mark.parametrize(
    "rel",
    [
        DF_INDEX,
        "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",  # ns timestamps
        "hta/nccl_parser_config/nccl_data.json.gz",  # collectives
        "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",  # DataLoader workers, backward
        "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",  # AMD
    ],
)
def test_every_column_is_the_whole_traces_byte_for_byte(rel: str) -> None:
    err = _same_both_ways(trace_path(rel), "--csv", "-c", EVERY_COLUMN)
    assert "read a step window at a time" in err


@pytest.mark.parametrize("fmt", ["--json", "--tsv"])
def test_json_and_tsv_are_the_whole_traces(fmt: str) -> None:
    _same_both_ways(trace_path(DF_INDEX), fmt)


def test_the_terminal_table_and_a_limit(many_steps: Path) -> None:
    # -n stops at the limit: the same first rows as the whole trace's.
    _same_both_ways(many_steps, "-n", "40", "-w", "120")
    _same_both_ways(many_steps, "--csv", "-n", "7")
    # Each window's rows go out as they come: 14 steps, every row once, idx 0..n-1 in start order.
    code, out, _ = _kernels(many_steps, "--windows", "--csv", "-c", "idx,start_us")
    rows = [line.split(",") for line in out.splitlines()[1:]]
    assert code == 0 and [int(r[0]) for r in rows] == list(range(len(rows))) and len(rows) > 14
    assert [float(r[1]) for r in rows] == sorted(float(r[1]) for r in rows)


def test_a_kernel_that_starts_after_the_next_steps_first_keeps_its_place(tmp_path: Path) -> None:
    # The trace's replayed kernels given their graph ids, as CUDA 12 Kineto records
    # them (kinetolens then numbers no graph and reads the trace in windows): 79
    # kernels launched late in a step start after the next step's first kernel,
    # and the windowed table still lists every kernel in start order, as the whole one.
    with gzip.open(trace_path(GRAPHS), "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e.get("ph") == "X" and "GraphLaunch" in e.get("name", "") and "correlation" in e.get("args", {})}
    nodes: dict[int, int] = {}
    for e in events:
        args = e.get("args", {})
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and args.get("correlation") in launches:
            args["graph id"] = 7
            args["graph node id"] = nodes.setdefault(args["correlation"], 0)
            nodes[args["correlation"]] += 1
    assert nodes, "no graph replays in the trace"
    recorded = tmp_path / "recorded_graph_ids.json"
    recorded.write_text(json.dumps(doc))
    err = _same_both_ways(recorded, "--csv", "-c", EVERY_COLUMN)
    assert "read a step window at a time" in err
    code, out, _ = _kernels(recorded, "--whole", "--csv", "-c", "idx,step")
    steps = [int(s) if s else -1 for s in (line.split(",")[1] for line in out.splitlines()[1:])]
    assert code == 0 and sum(b < a for a, b in zip(steps, steps[1:])) > 0  # the case is there


def test_numbered_graphs_are_read_whole_and_say_why() -> None:
    err = _same_both_ways(trace_path(GRAPHS), "--csv", "-c", "idx,graph,op")
    assert "read whole" in err and "numbers its CUDA/HIP graph replays" in err
    assert "read a step window at a time (" not in err


def test_a_trace_without_steps_is_read_whole_and_says_why() -> None:
    code, out, err = _kernels(trace_path(NO_STEPS), "--windows", "--csv", "-n", "3")
    assert code == 0 and "no ProfilerStep ranges" in err and "read whole" in err
    assert len(out.splitlines()) == 4


def test_windows_with_a_step_and_a_cpu_only_trace_are_one_line() -> None:
    res = kinetolens("kernels", trace_path(DF_INDEX), "--windows", "--step", "3")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--step reads the trace whole" in res.stderr
    res = kinetolens("kernels", trace_path(CPU_ONLY), "--windows")
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert re.search(r"has no GPU kernels, memcpys or memsets to list", res.stderr)


def test_a_small_trace_is_read_whole_by_default() -> None:
    code, _, err = _kernels(trace_path(DF_INDEX), "--csv", "-n", "2")
    assert code == 0 and "read a step window" not in err


def test_a_trace_paired_with_a_graph_capture_is_read_whole(tmp_path: Path) -> None:
    # The capture trace beside a replay trace pairs with the whole trace (its
    # replays with their captured ops): no command reads such a trace in windows.
    import shutil

    trace = tmp_path / "run.json.gz"
    shutil.copy(trace_path(DF_INDEX), trace)
    capture = trace_path("tracelens/inference/vllm_prefilldecode_piecewise/capture_traces")
    shutil.copytree(capture, tmp_path / "capture_traces")
    for command in ("kernels", "ops"):
        res = kinetolens(command, trace, "--windows", "--csv", *(["-n", "2"] if command == "kernels" else []))
        assert res.returncode == 0, res.stderr
        assert "read a step window" not in res.stderr + res.stdout
    # The same trace alone reads in windows, and with a capture given reads whole.
    alone = tmp_path / "alone" / "run.json.gz"
    alone.parent.mkdir()
    shutil.copy(trace, alone)
    assert "read a step window at a time" in kinetolens("kernels", alone, "--windows", "--csv", "-n", "2").stderr
    res = kinetolens("kernels", alone, "--windows", "--csv", "-n", "2", "--capture", str(tmp_path / "capture_traces"))
    assert res.returncode == 0 and "read a step window" not in res.stderr
