"""A recommendation saves time or says nothing: its saving is >= 0 and the
step it predicts is today's step (the one every view shows) less the saving.

The simulator re-times each step's dependency graph; its re-timing of the
unchanged graph is not the measured step, so a prediction taken from it
said "saves 0.00 ms (step -> 13.46 ms)" of a 12.96 ms step, and "903.54 ms
(step -> 15,268.52 ms)" of a 14,525.8 ms one.
"""

from __future__ import annotations

import pytest

import kinetolens
from kinetolens.analysis.summary import summarize
from tests.conftest import trace_path


@pytest.mark.parametrize(
    "rel",
    ["ai-performance-engineering/b200_gpt2_toy/deepseek_v3_trace.json.gz", "param/resnet_kineto/resnet_kineto.json.gz"],
)
def test_predicted_step_is_todays_step_less_the_saving(rel: str) -> None:
    s = summarize(kinetolens.load(trace_path(rel), cache=False))
    step_ms = s.steps.average_us.total / 1000
    simulated = [r for r in s.recommendations if r.predicted_step_ms is not None]
    assert simulated, "the simulator should predict a step for some advice"
    for r in simulated:
        assert r.saving_ms >= 0, r
        assert r.predicted_step_ms <= step_ms + 1e-9, (r.rule, r.predicted_step_ms, step_ms)
        assert r.predicted_step_ms == pytest.approx(step_ms - r.saving_ms), r.rule
