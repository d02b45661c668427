"""The terminal summary's words where a figure would mislead."""

from __future__ import annotations

from tests.conftest import trace_path
from tests.terminal import cli_text


def test_a_gpu_only_trace_says_no_attribution_is_possible() -> None:
    # TraceLens' MI210 GPU-only trace: 562 kernels, no CPU op; no "0.0% with an op", no backward rows.
    out = " ".join(cli_text("summary", str(trace_path("tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz")), "--no-cache", columns=80).split())
    assert "attribution none possible: the trace records no CPU op to tie a kernel to" in out
    assert "with an op" not in out and "backward kernel time" not in out


def test_a_trace_without_steps_says_so_not_an_empty_list() -> None:
    # one training step of GPT-2 on a B200 with no ProfilerStep range: "steps 0 []" before
    out = " ".join(cli_text("summary", str(trace_path("ai-performance-engineering/b200_gpt2_toy/deepseek_v3_trace.json.gz")),
                            "--no-cache", columns=80).split())  # fmt: skip
    assert "steps none marked (no ProfilerStep# range): the whole trace is one step" in out
    assert "[]" not in out
