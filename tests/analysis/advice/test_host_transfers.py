"""The host_transfers rule: a step that waits on copies between host and GPU."""

from __future__ import annotations

import pytest

from kinetolens import load
from kinetolens.analysis.summary import summarize
from tests.conftest import trace_path


def test_nsys_host_copies_that_fill_the_window_are_advised() -> None:
    # FastVideo's two-GPU export: 96.8% of the window only copies run (50.95 GB
    # host-to-device over both GPUs at 27.7 GB/s, the weights loaded each run);
    # before, the advice was a 0.70 ms sync and a 0.05 ms launch saving.
    info = summarize(load(trace_path("nsys/nsys-ai_h100_2gpu_1s.sqlite"), cache=False))
    first = info.recommendations[0]
    assert first.rule == "host_transfers"
    assert first.saving_ms == pytest.approx(info.steps.average_us.memcpy / 1000, rel=1e-9)
    assert "96.8% of the step" in first.evidence and "50.95 GB to and from 2 GPUs at 27.7 GB/s" in first.evidence
    assert "pageable" not in first.evidence  # 1.5 kB of 51 GB: not worth a word


def test_host_copies_below_a_fifth_of_the_step_are_not_advised() -> None:
    # pipit's saxpy MPI export: copies alone fill 14.1% of its window, under the rule's 20%.
    info = summarize(load(trace_path("nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"), cache=False))
    assert info.steps.average_us.memcpy / info.steps.average_us.total == pytest.approx(0.141, abs=0.001)
    assert "host_transfers" not in [f.rule for f in info.recommendations]
