"""``kinetolens diff`` of traces read a step window at a time.

From 1.5 GB of JSON (or with ``--windows``) each side's trace is read a step
window at a time and only its sums are kept (:mod:`kinetolens.analysis.diff_sums`):
each window sums the ops starting in the part of the trace it owns and the
GPU work launched then.  Every level's table and the summary must be the
whole read's: an op or kernel counted in two windows, or in none, would
change its calls and time; a step counted twice, the per-step means.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kinetolens.analysis.diff_levels import LEVELS
from kinetolens.cli.main import cli
from tests.conftest import QWEN_H100, trace_path

DLRM_0 = "param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json.gz"
DLRM_1 = "param/dlrm_kineto/worker1_step_12.1694128201556.pt.trace.json.gz"
RESOLVER = "hta/df_index_resolver/df_index_resolver.json.gz"
CONTROL = "hta/trace_diff/control/control.json.gz"
TEST = "hta/trace_diff/test/test.json.gz"


def _diff(baseline: Path, experiment: Path, *options: str) -> tuple[dict, str]:
    result = CliRunner().invoke(cli, ["diff", str(baseline), str(experiment), "--no-cache", "--json", *options], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), result.stderr


def _same_both_ways(baseline: Path, experiment: Path, *options: str) -> dict[str, dict]:
    out = {}
    for level in LEVELS:
        whole, _ = _diff(baseline, experiment, "-l", level, "--whole", *options)
        windowed, notes = _diff(baseline, experiment, "-l", level, "--windows", *options)
        assert notes.count("read a step window at a time") == 2, notes
        assert windowed == whole, level
        out[level] = whole
    return out


def test_five_steps_against_one_give_the_whole_diff(qwen_steps: Path) -> None:
    # Five windows on one side: the per-step figures divide the five steps' sums by five.
    tables = _same_both_ways(qwen_steps, trace_path(QWEN_H100))
    ops = {r["name"]: r for r in tables["op"]["rows"]}
    assert ops["aten::mm"]["baseline_calls"] == ops["aten::mm"]["experiment_calls"] > 0
    summary = tables["op"]["summary"]
    assert summary["baseline"]["steps"] == [5] and summary["experiment"]["steps"] == [1]


@pytest.mark.parametrize("options", [(), ("--exact-names",)], ids=["matched", "exact"])
def test_nccl_ranks_give_the_whole_diff(options: tuple[str, ...]) -> None:
    # Two ranks of a DLRM job: NCCL kernels no op launched (the "(no op)" row), backward threads.
    tables = _same_both_ways(trace_path(DLRM_0), trace_path(DLRM_1), *options)
    assert any(r["name"] == "(no op)" for r in tables["op"]["rows"])
    assert tables["module"]["rows"] or tables["kernel"]["rows"]


def test_two_devices_give_the_whole_diff() -> None:
    _same_both_ways(trace_path(RESOLVER), trace_path(RESOLVER))


def test_a_trace_with_numbered_graph_replays_is_read_whole_and_says_why() -> None:
    whole, _ = _diff(trace_path(CONTROL), trace_path(TEST), "--whole")
    windowed, notes = _diff(trace_path(CONTROL), trace_path(TEST), "--windows")
    assert windowed == whole
    assert "control.json.gz: read a step window at a time (6 steps)" in notes
    assert "test.json.gz: read whole, not a step window at a time: kinetolens numbers its CUDA/HIP graph replays" in notes
