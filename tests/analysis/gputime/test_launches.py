"""Copy bandwidth and graph launches, as ``kinetolens launches`` reports them."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from kinetolens import load
from kinetolens.analysis.gputime import launch
from tests.conftest import trace_path

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
BW_FIELD = "memory bandwidth (GB/s)"


def _copies_with_bandwidth(rel: str) -> list[dict]:
    with gzip.open(trace_path(rel), "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return [e for e in events if e.get("ph") == "X" and BW_FIELD in (e.get("args") or {})]


def test_copy_bandwidth_is_kinetos_on_a_whole_us_trace() -> None:
    # The file writes durations in whole µs: a 128,000-byte memset timed at
    # 1.44 µs is written as "1", so bytes / written duration says 128 GB/s,
    # while Kineto wrote 88.9 GB/s from the exact duration.
    copies = _copies_with_bandwidth(RESNET)
    assert len(copies) == 324
    ours = launch.memory_bandwidth(load(trace_path(RESNET))).sort("ts")
    expected = sorted((round(e["ts"] * 1000), e["args"][BW_FIELD]) for e in copies)
    assert ours.height == len(expected)
    assert ours["ts"].to_list() == [ts for ts, _ in expected]
    assert ours["memory_bw_gbps"].to_list() == pytest.approx([bw for _, bw in expected])
    memset = ours.filter((pl.col("bytes") == 128_000) & (pl.col("end") - pl.col("ts") == 1000)).row(0, named=True)
    assert memset["memory_bw_gbps"] == pytest.approx(88.889, abs=1e-3)


def test_copy_bandwidth_falls_back_to_bytes_over_duration() -> None:
    # A guard (passes before the fix too): nsys exports carry no bandwidth
    # field; their durations are exact ns.
    trace = load(trace_path("nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"))
    copies = launch.memory_bandwidth(trace).filter(pl.col("end") > pl.col("ts"))
    assert copies.height > 0
    assert copies["memory_bw_gbps"].to_list() == pytest.approx(
        (copies["bytes"] / (copies["end"] - copies["ts"])).to_list()
    )


def test_back_to_back_copies_do_not_add_up() -> None:
    # On a whole-µs trace one copy often starts at the µs the previous one on
    # its stream ends; the summed bandwidth must not count both at that instant.
    trace = load(trace_path("hta/trace_diff/test/test.json.gz"))
    dtod = launch.memory_bandwidth(trace).filter(pl.col("name") == "Memcpy DtoD")
    assert dtod["stream"].n_unique() == 1
    summary = launch.memory_bw_summary(trace).filter(pl.col("name") == "Memcpy DtoD").row(0, named=True)
    assert summary["max"] == pytest.approx(dtod["memory_bw_gbps"].max())
    assert summary["count"] == dtod.height


GRAPHS = "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"


def _graph_launches_in_file() -> tuple[dict[int, float], dict[int, int]]:
    """hipGraphLaunch calls (correlation -> µs) and the GPU activities each released, read from the JSON."""
    with gzip.open(trace_path(GRAPHS), "rt") as fh:
        events = json.load(fh)["traceEvents"]
    calls = {
        e["args"]["correlation"]: e["dur"] for e in events
        if e.get("ph") == "X" and e.get("name") == "hipGraphLaunch"
    }
    released: dict[int, int] = {}
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and corr in calls:
            released[corr] = released.get(corr, 0) + 1
    return calls, released


def test_a_graph_launch_counts_once_with_the_kernels_it_released() -> None:
    calls, released = _graph_launches_in_file()
    assert len(calls) == 25 and sum(released.values()) == 361  # up to 15 kernels per replay
    trace = load(trace_path(GRAPHS))
    stats = launch.launch_stats(trace)
    graphs = stats.filter(pl.col("launch") == "hipGraphLaunch")
    assert graphs.height == len(calls)
    assert dict(zip(graphs["correlation"], graphs["kernels"])) == released
    assert graphs["cpu_duration_us"].sum() == pytest.approx(sum(calls.values()))
    # Every other launch released one activity; a call is one row.
    assert (stats.filter(pl.col("launch") != "hipGraphLaunch")["kernels"] == 1).all()
    assert stats["correlation"].n_unique() == stats.height
    summary = launch.launch_summary(stats).filter(pl.col("metric") == "cpu_duration").row(0, named=True)
    assert summary["count"] == stats.height
    assert summary["sum_us"] == pytest.approx(stats["cpu_duration_us"].sum())
    # A graph's kernels are already in a graph: none of them is a "short kernel".
    short = launch.short_kernels(stats, short_us=1e9)
    assert int(short["count"].sum()) == stats.filter(
        (pl.col("kernels") == 1) & (pl.col("gpu_duration_us") < pl.col("cpu_duration_us"))
    ).height
    table = launch.multi_kernel_launches(stats).row(0, named=True)
    assert (table["launch"], table["launches"], table["kernels"], table["max_kernels"]) == (
        "hipGraphLaunch", 25, 361, max(released.values())
    )


def test_a_graph_launch_is_one_queue_entry() -> None:
    trace = load(trace_path(GRAPHS))
    calls = trace.kernels["launch_id"].drop_nulls().n_unique()
    assert calls == 87  # 25 graph launches releasing 361 kernels, 62 single launches
    queue = launch.queue_length(trace)
    # One enqueue and one dequeue per launch call (all on one stream here).
    assert trace.kernels["stream"].n_unique() == 1
    assert queue.height == 2 * calls
    assert queue["queue_length"].max() <= calls
    assert queue["queue_length"][-1] == 0


def test_launches_command_reports_multi_kernel_launches() -> None:
    from click.testing import CliRunner

    from kinetolens.cli.main import cli

    result = CliRunner().invoke(cli, ["launches", str(trace_path(GRAPHS)), "--json", "--no-cache"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [(r["launch"], r["launches"], r["kernels"]) for r in doc["multi_kernel_launches"]] == [("hipGraphLaunch", 25, 361)]
    counts = {r["metric"]: r["count"] for r in doc["launch_summary"]}
    assert counts == {"cpu_duration": 87, "gpu_duration": 87, "launch_delay": 87}  # 62 + 25 calls, not 62 + 361
    table = CliRunner().invoke(cli, ["launches", str(trace_path(GRAPHS)), "--no-cache"], env={"COLUMNS": "100"})
    assert "multi kernel launches (µs)" in table.output and "hipGraphLaunch" in table.output
    assert "cpu_duration" in table.output  # not folded across two lines at 100 columns
