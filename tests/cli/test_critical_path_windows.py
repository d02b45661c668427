"""``kinetolens critical-path`` of a trace read a step window at a time.

A step's critical path needs only that step's window: from 1.5 GB of JSON
(or with ``--windows``) the command decodes the trace to Parquet parts and
builds the window of ``--step`` alone, or, without ``--step``, of the
sample of whole steps the summary's recommendations use; a note on stderr
says which.  The path is the one the whole trace gives for those steps.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kinetolens.analysis.paths.sampling import SAMPLE_STEPS
from tests.cli.kinetolens_process import kinetolens, kinetolens_json
from tests.conftest import trace_path

NO_STEPS = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


def _run(path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return kinetolens("critical-path", path, *options)


def _json(path: Path, *options: str) -> tuple[dict, str]:
    return kinetolens_json("critical-path", path, *options)


def test_one_steps_path_from_its_window_is_the_whole_traces(many_steps: Path) -> None:
    windowed, note = _json(many_steps, "--windows", "--step", "557")  # the generated steps are 551-564
    whole, _ = _json(many_steps, "--whole", "--step", "557")
    assert "read a step window at a time: the critical path of step 557" in note
    assert windowed["length_us"] == pytest.approx(whole["length_us"], rel=1e-12) and whole["length_us"] > 0
    assert windowed["summary"] == whole["summary"]
    assert windowed["windows"] == whole["windows"]
    (got,), (want,) = windowed["paths"], whole["paths"]
    assert (got["nodes"], got["edges"], len(got["path"])) == (want["nodes"], want["edges"], len(want["path"]))


def test_without_a_step_the_sample_of_whole_steps(many_steps: Path) -> None:
    windowed, note = _json(many_steps, "--windows")
    whole, _ = _json(many_steps, "--whole")
    got = {w["step"]: w for w in windowed["windows"]}
    assert len(got) == SAMPLE_STEPS < len(whole["windows"])
    assert f"({SAMPLE_STEPS} of 14 whole steps)" in note
    for w in whole["windows"]:  # each sampled step's path is the whole trace's for that step
        if w["step"] in got:
            assert got[w["step"]] == w


def test_a_step_the_trace_lacks_is_one_line(many_steps: Path) -> None:
    res = _run(many_steps, "--windows", "--step", "999")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "has no step 999" in lines[0], res.stderr


@pytest.mark.parametrize("options", [("--annotation", "Profiler"), ("--keep-last-step",), ("--perfetto", "cp.json")])
def test_windows_take_whole_steps_only(options: tuple[str, ...]) -> None:
    res = _run(trace_path(NO_STEPS), "--windows", *options)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "--windows" in lines[0], res.stderr


def test_a_trace_without_steps_is_read_whole_and_says_why() -> None:
    res = _run(trace_path(NO_STEPS), "--windows", "-w", "100")
    assert "no ProfilerStep ranges" in res.stderr and "read whole" in res.stderr
    assert "read a step window" not in res.stderr
