"""``kinetolens whatif`` of a trace read a step window at a time.

The what-if re-times each step's own dependency graph, so a step's window
is all it needs: from 1.5 GB of JSON (or with ``--windows``) each whole step
(or ``--step``) is re-timed in its window and the results joined
(:func:`kinetolens.runs.windowed_read.whatif_in_windows`).  The prediction
is the whole trace's, step by step.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cli.kinetolens_process import kinetolens, kinetolens_json
from tests.conftest import trace_path

DF_INDEX = "hta/df_index_resolver/df_index_resolver.json.gz"


def _run(path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return kinetolens("whatif", path, *options)


def _json(path: Path, *options: str) -> tuple[dict, str]:
    return kinetolens_json("whatif", path, *options)


def _same(got: dict, want: dict) -> None:
    assert [s["step"] for s in got["steps"]] == [s["step"] for s in want["steps"]] and want["steps"]
    for a, b in zip(got["steps"], want["steps"]):
        for key in ("measured_us", "predicted_us", "length_us"):
            assert a[key] == pytest.approx(b[key], rel=1e-9), (a["step"], key)
    for key in ("measured_us", "predicted_us", "host_floor_us"):
        assert (got[key] is None) == (want[key] is None)
        if want[key] is not None:
            assert got[key] == pytest.approx(want[key], rel=1e-9), key
    assert got["matched"] == want["matched"]
    # the new paths' split, per bound-by category
    assert [r["bound_by"] for r in got["summary"]] == [r["bound_by"] for r in want["summary"]]
    for a, b in zip(got["summary"], want["summary"]):
        assert a["us"] == pytest.approx(b["us"], rel=1e-9) and a["edges"] == b["edges"], a["bound_by"]


@pytest.mark.parametrize(
    ("rel", "change"),
    [(DF_INDEX, "kernel:gemm=0.5"), (DF_INDEX, "category:cpu=0.5")],
    ids=["gemm-kernels", "cpu"],
)
def test_every_steps_prediction_from_its_window_is_the_whole_traces(rel: str, change: str) -> None:
    path = trace_path(rel)
    windowed, note = _json(path, "--windows", "--change", change)
    whole, _ = _json(path, "--whole", "--change", change)
    _same(windowed, whole)
    assert f"read a step window at a time ({len(whole['steps'])} steps re-timed)" in note


def test_many_steps_and_one_step(many_steps: Path) -> None:
    windowed, _ = _json(many_steps, "--windows", "--change", "kernel:gemm=0.5")
    whole, _ = _json(many_steps, "--whole", "--change", "kernel:gemm=0.5")
    _same(windowed, whole)
    one, note = _json(many_steps, "--windows", "--change", "kernel:gemm=0.5", "--step", "557")
    assert [s["step"] for s in one["steps"]] == [557] and "(1 step re-timed)" in note
    (want,) = [s for s in whole["steps"] if s["step"] == 557]
    assert one["steps"][0]["predicted_us"] == pytest.approx(want["predicted_us"], rel=1e-9)


def test_a_step_the_trace_lacks_is_one_line(many_steps: Path) -> None:
    res = _run(many_steps, "--windows", "--change", "kernel:gemm=0.5", "--step", "999")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "has no step 999" in lines[0], res.stderr
