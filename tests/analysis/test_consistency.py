"""One definition of each headline number, the same in summary, report, dashboard and API.

"""

from __future__ import annotations

import polars as pl
import pytest

import kinetolens
from kinetolens import json_codec
from kinetolens.analysis.memory.basis import ALLOCATOR, WINDOW_SUM
from kinetolens.analysis.memory.usage import memory_events, memory_peaks, peak_memory
from kinetolens.analysis.summary import summarize
from kinetolens.views import report_data, units
from kinetolens.views.dashboard import pages, sources
from kinetolens.views.dashboard.sources import Ctx
from kinetolens.views.dashboard.state import Loaded
from kinetolens.views.report_frames import overview_frame
from tests.conftest import trace_path

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def _cards(blocks: list[dict]) -> dict[str, str]:
    return {k: v for b in blocks if b.get("type") == "cards" for k, v in b["items"]}


@pytest.fixture(scope="module")
def qwen() -> kinetolens.Trace:
    return kinetolens.load(trace_path(QWEN))


def test_step_time_is_one_number_everywhere(qwen: kinetolens.Trace) -> None:
    # the step's host range is 47.15 ms and it opens with a 14.1 ms
    # cudaDeviceSynchronize on the previous step's kernels; its time is its 35.18 ms window.
    api_ms = float(qwen.steps["dur"].mean()) / 1e6  # type: ignore[arg-type]
    summary_ms = summarize(qwen).steps.mean_us / 1000
    report = report_data.collect(qwen)
    report_ms = report.summary.steps.mean_us / 1000
    breakdown_ms = float(report.breakdown["total"].mean()) / 1e6  # type: ignore[arg-type]
    dashboard = _cards(pages.overview(Ctx(Loaded(qwen), None, {})))["mean step"]
    assert api_ms == pytest.approx(35.183362)  # regression pin (kinetolens' own output)
    assert summary_ms == pytest.approx(api_ms) and report_ms == pytest.approx(api_ms)
    assert breakdown_ms == pytest.approx(api_ms)
    assert dashboard == f"{api_ms:,.3f} ms"
    row = qwen.steps.row(0, named=True)
    assert (row["cpu_end"] - row["ts"]) / 1e6 == pytest.approx(47.151395)  # the host range, named cpu_end
    assert row["end"] - row["start"] == row["dur"]


@pytest.mark.parametrize("rel", [QWEN, RESNET])
def test_peak_memory_is_one_number_everywhere(rel: str) -> None:
    # the resnet trace has no allocator totals; its GPU peak used to be "-"
    # in the summary and 2.6 GiB in the memory view.
    trace = kinetolens.load(trace_path(rel))
    view = {r["device"]: r for r in memory_peaks(memory_events(trace)).to_dicts()}
    api = {r["device"]: r for r in peak_memory(trace).to_dicts()}
    summary = summarize(trace)
    in_summary = {m["device"]: m for m in json_codec.to_builtins(summary.memory)}
    gpu_table = {f"GPU{g['device']}": g for g in json_codec.to_builtins(summary.gpu)}
    dashboard_gpus = {f"GPU{g['device']}": g for g in sources.gpus(Ctx(Loaded(trace), None, {})).to_dicts()}
    dashboard_cards = _cards(pages.memory(Ctx(Loaded(trace), None, {})))
    report = report_data.collect(trace)
    in_report = {r["device"]: r for r in report.memory_peaks.to_dicts()}
    assert set(view) == set(api) == set(in_summary) == set(in_report)
    for device, row in view.items():
        peak = row["peak_allocated"]
        assert api[device]["peak_allocated"] == in_summary[device]["peak_allocated"] == in_report[device]["peak_allocated"] == peak
        assert api[device]["basis"] == in_summary[device]["basis"] == row["basis"]
        # The event at the peak and its op: found for the peak events alone in the
        # API (what the memory rule reads), for every event in the memory view.
        at_peak = ("peak_ts", "peak_op_id", "peak_op", "peak_module")
        assert [api[device][c] for c in at_peak] == [row[c] for c in at_peak]
        label = "" if row["basis"] == ALLOCATOR else " (allocated while profiling only)"
        assert dashboard_cards[f"{device} peak allocated"] == f"{units.memory(peak)}{label}"  # one format
        if device.startswith("GPU"):
            assert gpu_table[device]["peak_allocated_bytes"] == dashboard_gpus[device]["peak_allocated_bytes"] == peak
    assert any(r["peak_op"] for r in view.values())
    if rel == RESNET:
        assert view["GPU0"]["peak_allocated"] == 2_791_636_480 and view["GPU0"]["basis"] == WINDOW_SUM


def test_kernels_launched_before_profiling_are_explained(qwen: kinetolens.Trace) -> None:
    # 30% of the Qwen kernel time has no launch record (no op, ever).
    kernels = qwen.kernels.filter(pl.col("kind") == "kernel")
    orphan = kernels.filter(pl.col("launch_id").is_null() & (pl.col("external_id").fill_null(0) == 0))
    share = float(orphan["dur"].sum()) / float(kernels["dur"].sum())
    block = summarize(qwen).unrecorded_launches
    assert block.share == pytest.approx(share) and 0.29 < share < 0.31
    # They drain before the step's window opens: no step claims them, so per-step views
    # (ops --step, kernels --step) add up to the step's own kernel time.
    assert orphan["step"].null_count() == orphan.height and block.in_steps_share in (None, 0.0)
    assert block.note.startswith(f"{share:.1%} of kernel time: launched before profiling began")
    report = dict(overview_frame(report_data.collect(qwen)).iter_rows())
    assert report["kernels whose launch was not recorded"] == block.note


def test_every_launch_recorded_says_nothing() -> None:
    block = summarize(kinetolens.load(trace_path(RESNET))).unrecorded_launches
    assert block.note is None and not block.share


def test_memory_peaks_say_what_they_cover(qwen: kinetolens.Trace) -> None:
    # the CPU allocator counts only what it allocated while profiling;
    # a GPU allocator's totals give the bytes alive when the window opened.
    peaks = {r["device"]: r for r in json_codec.to_builtins(summarize(qwen).memory)}
    assert peaks["CPU"]["basis"] == WINDOW_SUM and peaks["CPU"]["live_at_start"] is None
    assert "not counted" in peaks["CPU"]["note"]
    assert peaks["GPU0"]["basis"] == ALLOCATOR
    assert peaks["GPU0"]["live_at_start"] == 984_742_400  # regression pin: 939.1 MiB of weights before the window


def _cli(*args: str) -> str:
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, check=True,
        env={**os.environ, "COLUMNS": "80"},
    ).stdout


def test_terminal_views_say_what_a_memory_peak_counts() -> None:
    # next to the number, in the summary and the memory view.
    path = str(trace_path(QWEN))
    summary = " ".join(_cli("summary", path).split())
    assert "peak memory CPU 16 B, allocated while profiling only" in summary
    assert "peak memory GPU0 1.95 GiB (939 MiB alive when profiling started)" in summary  # 3 figures
    memory = _cli("memory", path)
    rows: dict[str, list[str]] = {}
    for line in memory.splitlines():
        if line.strip().startswith(("GPU0 ", "CPU ")):
            rows.setdefault(line.split()[0], line.split())  # the table comes before the "peak at" lines
    assert rows["GPU0"][1:6] == ["1.95", "GiB", "all", "939", "MiB"]
    assert rows["CPU"][1:5] == ["16", "B", "window", "-"]
    assert "counts window: allocated while profiling only" in " ".join(memory.split())


def test_calls_of_a_module_are_the_times_it_ran(qwen: kinetolens.Trace) -> None:
    # one attention module showed 29 calls in `ops --aggregate-by module`
    # (its top-level ops) and 15 in `roofline --by module` (those carrying work); it ran once.
    from kinetolens.analysis.workload.modules import module_calls
    from kinetolens.analysis.workload.ops import op_stats
    from kinetolens.analysis.hardware.roofline import roofline_by
    from kinetolens.analysis.hardware.gpu_spec import gpu_spec

    module = "Qwen2Model_0.Qwen2DecoderLayer_0.Qwen2Attention_0"
    ran = qwen.python.filter(pl.col("name") == "nn.Module: Qwen2Attention_0").height
    assert ran == 1
    ops_row = op_stats(qwen, by="module").filter(pl.col("module") == module).row(0, named=True)
    roof_row = roofline_by(qwen, gpu_spec(qwen), by="module").filter(pl.col("module") == module).row(0, named=True)
    counted = module_calls(qwen).filter(pl.col("module") == module)["calls"].item()
    assert ops_row["calls"] == roof_row["calls"] == counted == ran
    # What each view counted before, kept under a name that says so (regression pins).
    assert (ops_row["ops"], roof_row["ops"]) == (29, 15)
    dashboard = sources.ops(Ctx(Loaded(qwen), None, {"group": "module"}))
    assert dashboard.filter(pl.col("module") == module)["calls"].item() == ran


@pytest.mark.parametrize(
    ("rel", "field"),
    [
        # a GPU-only capture (no CPU op): "kernels attributed to an op 0.0%" read as a failure
        ("tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz", "kernel attribution"),
        # no ProfilerStep range: "steps 0", "mean step -" beside a breakdown of the whole trace
        ("ai-performance-engineering/b200_gpt2_toy/deepseek_v3_trace.json.gz", "steps"),
    ],
)
def test_what_a_trace_lacks_is_said_alike_in_the_terminal_and_the_dashboard(rel: str, field: str) -> None:
    from kinetolens.views import empty_reasons
    from tests.terminal import cli_text

    trace = kinetolens.load(trace_path(rel))
    cards = _cards(pages.overview(Ctx(Loaded(trace), None, {})))
    said = {"kernel attribution": empty_reasons.NO_ATTRIBUTION, "steps": empty_reasons.NO_STEPS}[field]
    assert cards[field] == said
    if field == "kernel attribution":
        assert "kernels attributed to an op" not in cards and summarize(trace).attribution.possible is False
    else:
        assert "mean step" not in cards
    assert said in " ".join(cli_text("summary", str(trace_path(rel)), "--no-cache", columns=80).split())
    assert said in overview_frame(report_data.collect(trace))["value"].to_list()
