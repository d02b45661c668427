"""What a trace without allocator events is told to do depends on where it came from."""

from __future__ import annotations

import subprocess
import sys

import kinetolens
from kinetolens.views.report_data import collect, left_out
from tests.conftest import trace_path

NSYS = "nsys/nsys-ai_h100_2gpu_1s.sqlite"


def test_nsight_inputs_are_not_told_to_set_profile_memory():
    run = subprocess.run([sys.executable, "-m", "kinetolens.cli.main", "memory", trace_path(NSYS), "--no-cache"],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "Nsight Systems export holds no PyTorch allocator events" in run.stderr
    assert "Kineto trace" in run.stderr  # what to capture instead


def test_the_report_says_the_same_for_nsight():
    why = left_out(collect(kinetolens.load(trace_path(NSYS))))
    assert "Nsight Systems export" in why["memory"], why
