"""A step's critical path lies in the step's own window, the one ``summary`` reports.

The graph takes the ops of the step's host range; the GPU work they queue
runs into the next step, whose time it is.  So each step's path is cut to
the model's step window (:mod:`kinetolens.model.steps`): its span is the
step's time and the steps' paths add up to no more than the steps.
"""

from __future__ import annotations


import pytest

import kinetolens
from kinetolens.analysis.paths.critical_path import critical_paths, step_windows
from tests.terminal import cli_text
from tests.conftest import trace_path

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def test_each_step_path_fits_its_step_window() -> None:
    trace = kinetolens.load(trace_path(RESNET))
    paths = critical_paths(trace, step_windows(trace))
    steps = {s: (e - b) / 1000 for s, b, e in trace.steps.select("step", "start", "end").iter_rows()}
    assert len(paths) == len(steps) == 6
    for cp in paths:
        assert cp.span_us <= steps[cp.window.step] + 1e-6
        assert cp.length_us <= cp.span_us + 1e-6
        assert cp.path["start_us"].min() >= cp.window.clip[0] / 1000 - 1e-6
    assert sum(cp.length_us for cp in paths) <= sum(steps.values())


def _step_row(text: str, step: str) -> list[str]:
    return next(line.split() for line in text.splitlines() if line.split()[:1] == [step])


@pytest.mark.parametrize("columns", [80, 120])
def test_critical_path_span_is_the_summary_step_time(columns: int) -> None:
    path = cli_text("critical-path", str(trace_path(RESNET)), columns=columns)
    summary = cli_text("summary", str(trace_path(RESNET)), columns=columns)
    span_ms = float(_step_row(path, "6")[2])
    assert round(span_ms, 1) == float(_step_row(summary, "6")[1])  # 175.2 ms both
    qwen = cli_text("critical-path", str(trace_path(QWEN)), columns=columns)
    assert "span 35.2 ms" in qwen
