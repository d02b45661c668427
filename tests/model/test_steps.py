"""A last step cut short by the end of profiling: detected, shown, and left out of means.

"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.summary import summarize
from kinetolens.model.steps import complete_steps, incomplete_steps, without_incomplete_steps
from tests.conftest import TESTS, trace_path

JOB = TESTS / "distributed" / "cut_step_job.py"


def _env() -> dict[str, str]:
    return dict(os.environ)


@pytest.fixture(scope="module")
def cut_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real torch run on CPU whose process exits in the middle of its last profiled step."""
    pytest.importorskip("torch")
    logdir = tmp_path_factory.mktemp("cut")
    res = subprocess.run([sys.executable, str(JOB), str(logdir)], capture_output=True, text=True, timeout=300, env=_env())
    assert res.returncode == 0, res.stderr[-3000:]
    (path,) = sorted((logdir / "cut").glob("*.pt.trace.json.gz"))
    return path


def test_cut_last_step_is_detected_with_its_evidence(cut_trace: Path) -> None:
    steps = kinetolens.load(cut_trace, cache=False).steps
    assert steps.height == 5
    assert steps["complete"].to_list() == [True, True, True, True, False]
    assert incomplete_steps(steps) == [int(steps["step"][-1])]
    assert complete_steps(steps).height == 4
    # The job exits after 8 of the 10 all-reduces of its last step.
    assert steps["cut_reason"][-1] == "it ran 8 gloo:all_reduce where every other step ran 10"


def test_cut_step_is_shown_but_left_out_of_the_means(cut_trace: Path) -> None:
    trace = kinetolens.load(cut_trace, cache=False)
    block = summarize(trace).steps
    last = int(trace.steps["step"][-1])
    assert block.count == 5 and block.incomplete == (last,)
    rows = block.breakdown_us
    assert [r.complete for r in rows] == [True, True, True, True, False]
    whole = [r.total for r in rows if r.complete]
    assert block.mean_us == pytest.approx(sum(whole) / len(whole))
    assert block.average_us.total == pytest.approx(block.mean_us)
    assert "left out of the means" in block.incomplete_note
    out = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "summary", str(cut_trace), "--no-cache"],
        capture_output=True, text=True, env={**_env(), "COLUMNS": "120"}, check=True,
    ).stdout
    assert "1 cut short, not in the mean" in out
    assert f"{last}*" in out and f"step {last} was cut short when profiling stopped" in out


def test_cut_step_is_dropped_from_trimmed_views(cut_trace: Path) -> None:
    # what the idle and launches commands analyze.
    trace = kinetolens.load(cut_trace, cache=False)
    last = int(trace.steps["step"][-1])
    trimmed = without_incomplete_steps(trace)
    assert trimmed.steps["step"].to_list() == trace.steps["step"].to_list()[:-1]
    assert not (trimmed.ops["step"] == last).any()
    assert trimmed.ops.height < trace.ops.height


@pytest.mark.parametrize(
    "rel",
    [
        "hta/df_index_resolver/df_index_resolver.json.gz",
        "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
        "hta/trace_filter/sampled_rank-1.json.gz",
        "hta/trace_diff/test/test.json.gz",
    ],
)
def test_whole_last_steps_are_kept(rel: str) -> None:
    """HTA drops the last step of every trace; kinetolens keeps one that ran whole.

    On these traces every step launched the same number of GPU activities,
    so none was cut short: dropping the last one would lose a real step.
    """
    trace = kinetolens.load(trace_path(rel))
    assert trace.steps["complete"].all()
    assert without_incomplete_steps(trace) is trace
    block = summarize(trace).steps
    assert block.incomplete == () and block.incomplete_note is None


def test_idle_keeps_a_whole_last_step() -> None:
    # the idle command and the report cover the same steps.
    path = trace_path("hta/df_index_resolver/df_index_resolver.json.gz")
    out = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "idle", str(path), "--json"],
        capture_output=True, text=True, env=_env(), check=True,
    ).stdout
    kept = json.loads(out)["temporal_breakdown"][0]["kernel_span_us"]
    from kinetolens.analysis.gputime.idle import temporal_breakdown

    assert kept == pytest.approx(temporal_breakdown(kinetolens.load(path)).row(0, named=True)["kernel_span_us"])
    assert pl.DataFrame(json.loads(out)["temporal_breakdown"]).height == 1


def test_advice_and_diff_judge_whole_steps_only(cut_trace: Path) -> None:
    # per-step savings and diff means
    # divided by a step count that included the cut step.
    from kinetolens.analysis.diff import compare
    from kinetolens.analysis.advice.recommendations import recommendations

    trace = kinetolens.load(cut_trace, cache=False)
    whole = without_incomplete_steps(trace)
    assert [f.to_dict() for f in recommendations(trace)] == [f.to_dict() for f in recommendations(whole)]
    assert summarize(trace).recommendations == tuple(recommendations(whole))
    mean_us = summarize(trace).steps.mean_us
    info = compare(trace, trace).summary
    assert info["baseline"]["mean_step_us"] == pytest.approx(mean_us)
    assert info["baseline"]["steps"] == [4]
