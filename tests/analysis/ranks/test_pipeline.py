"""Pipeline stages of a real two-stage torch.distributed.pipelining job (gloo, CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kinetolens.analysis.ranks.dist_report import dist_report
from kinetolens.analysis.ranks.pipeline import GPIPE, ONE_F_ONE_B, ideal_bubble, schedule_of
from kinetolens.runs import summarize_run
from tests.terminal import run_cli

JOB = Path(__file__).resolve().parents[2] / "distributed" / "pipeline_job.py"


def _run(tmp_path_factory: pytest.TempPathFactory, schedule: str) -> Path:
    out = tmp_path_factory.mktemp(schedule)
    done = subprocess.run([sys.executable, str(JOB), str(out), schedule, "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def gpipe_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory, "gpipe")


def _waits_for_gradients_ms(path: Path) -> float:
    """From the raw events: per step, the time each ``Backward i`` range spends before its
    first autograd op (the stage waiting for the next one's gradient), averaged over steps."""
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    backward = [e for e in events if e["name"].startswith("Backward ") and e["name"].split()[-1].isdigit()]
    engine = sorted(e["ts"] for e in events if e["name"].startswith("autograd::engine::evaluate_function"))
    wait = 0.0
    for b in backward:
        first = next((t for t in engine if b["ts"] <= t <= b["ts"] + b["dur"]), b["ts"] + b["dur"])
        wait += first - b["ts"]
    return wait / 1000 / len(steps)


def test_gpipe_stages_their_schedule_and_bubble(gpipe_run: Path) -> None:
    report = dist_report(summarize_run(gpipe_run, "local:1", cache=False))
    stages = report.pipeline
    assert stages["rank"].to_list() == [0, 1]
    assert stages["schedule"].to_list() == [GPIPE, GPIPE] and stages["microbatches"].to_list() == [4, 4]
    assert stages["ideal_bubble_pct"].to_list() == pytest.approx([20.0, 20.0])  # (2 - 1) / (4 + 2 - 1)
    for row in stages.iter_rows(named=True):
        assert row["bubble_ms"] == pytest.approx(row["step_ms"] - row["compute_ms"], rel=1e-9)
        assert 0.0 < row["bubble_pct"] < 100.0
    # the first stage's bubble holds at least its waits for the second stage's gradients,
    # measured from the raw events
    first = next(gpipe_run.glob("rank0*.json"))
    assert stages.row(0, named=True)["bubble_ms"] >= _waits_for_gradients_ms(first) - 0.5
    out = run_cli("dist", str(gpipe_run), "--no-cache", columns=120)
    assert out.returncode == 0 and "pipeline stages" in out.stdout and "GPipe (all forwards, then all backwards)" in out.stdout


def test_1f1b_without_microbatch_ranges_is_read_from_its_passes(tmp_path_factory: pytest.TempPathFactory) -> None:
    # torch 2.13's Schedule1F1B records no Forward/Backward ranges: the passes between
    # transfers give the schedule, and each backward pass is one microbatch.
    stages = dist_report(summarize_run(_run(tmp_path_factory, "1f1b"), "local:1", cache=False)).pipeline
    assert stages["schedule"].to_list() == [ONE_F_ONE_B, ONE_F_ONE_B]
    assert stages["microbatches"].to_list() == [4, 4]
    # (bubble against the ideal is not asserted: on shared CPUs a descheduled op stretches the compute time)


def test_schedule_words_and_ideal_bubble() -> None:
    assert schedule_of("F0 F1 F2 F3 B0 B1 B2 B3") == GPIPE
    assert schedule_of("F0 F1 B0 F2 B1 F3 B2 B3") == ONE_F_ONE_B
    assert ideal_bubble(4, 8) == pytest.approx(3 / 11)
    assert ideal_bubble(1, 8) == 0.0
