"""What a summary's cost is made of, checked by structure rather than by timing:
the recommendations' what-if re-times a bounded, evenly spaced sample of the
steps, one step's graph at a time, and the summary says what was sampled."""

from __future__ import annotations

import json
import weakref
from pathlib import Path

import pytest
from click.testing import CliRunner

import kinetolens
from kinetolens.analysis.advice.recommendations import recommendations
from kinetolens.analysis.paths import whatif as whatif_module
from kinetolens.analysis.paths.whatif import SAMPLE_STEPS, parse_change, sample, whatif_many
from kinetolens.cli.main import cli
from tests.conftest import trace_path

GEN_TRACE = Path(__file__).resolve().parents[2] / "bench" / "gen_trace.py"


@pytest.fixture(scope="module")
def many_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real trace's two steps repeated (bench/gen_trace.py): 14 complete steps, more than the sample."""
    import runpy

    out = tmp_path_factory.mktemp("many_steps") / "many_steps.json"
    gen = runpy.run_path(str(GEN_TRACE))
    gen["main"](["--source", str(trace_path("hta/trace_filter/sampled_rank-0.json.gz")), "--size-mb", "12", "-o", str(out)])
    return out


def test_sample_is_evenly_spaced_with_both_ends() -> None:
    assert sample(60, 8) == [0, 8, 17, 25, 34, 42, 51, 59]
    assert sample(5, 8) == [0, 1, 2, 3, 4]
    assert sample(5, None) == [0, 1, 2, 3, 4]


def test_recommendations_retime_at_most_the_sample_one_step_at_a_time(many_steps: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = kinetolens.load(many_steps, cache=False)
    assert trace.steps.height > SAMPLE_STEPS
    prepared: list[object] = []
    alive_at_prepare: list[int] = []
    retimed: list[tuple[int | None, tuple[str, ...]]] = []
    real_prepare, real_predict = whatif_module.prepare, whatif_module.predict

    def counting_prepare(*args: object, **kwargs: object) -> object:
        alive_at_prepare.append(sum(ref() is not None for ref in prepared))
        replay = real_prepare(*args, **kwargs)
        prepared.append(weakref.ref(replay))
        return replay

    def counting_predict(replay: whatif_module.Replay, changes: list, paths: bool = True) -> object:
        retimed.append((replay.window.step, tuple(c.spec for c in changes)))
        return real_predict(replay, changes, paths)

    monkeypatch.setattr(whatif_module, "prepare", counting_prepare)
    monkeypatch.setattr(whatif_module, "predict", counting_predict)
    found = recommendations(trace)
    assert any(f.predicted_step_ms is not None for f in found), "no simulated saving on this trace"
    steps = {step for step, _ in retimed}
    # Every step is prepared once, re-timed once per change set, and at most the sample's size of them.
    assert len(prepared) == len(steps) == SAMPLE_STEPS
    assert len(retimed) == len(set(retimed)) == SAMPLE_STEPS * len({specs for _, specs in retimed})
    # Streamed: when a step is prepared, no earlier step's prepared graph is still held.
    assert alive_at_prepare == [0] * SAMPLE_STEPS
    ordered = sorted(trace.steps["step"].to_list())
    assert min(steps) == ordered[0] and max(steps) == ordered[-1]
    simulated = [f for f in found if f.predicted_step_ms is not None]
    assert all(f.simulated_on == f"{SAMPLE_STEPS} of {trace.steps.height} steps" for f in simulated)
    assert all(f"{SAMPLE_STEPS} of {trace.steps.height} steps" in f.estimate for f in simulated)


def test_whatif_many_without_a_bound_retimes_every_step(many_steps: Path) -> None:
    trace = kinetolens.load(many_steps)
    (all_steps,) = whatif_many(trace, [[parse_change("launch:0")]], paths=False, max_steps=None)
    assert len(all_steps.steps) == all_steps.of == trace.steps.height and all_steps.sampled is None
    (some,) = whatif_many(trace, [[parse_change("launch:0")]], paths=False)
    assert len(some.steps) == SAMPLE_STEPS and some.sampled == f"{SAMPLE_STEPS} of {trace.steps.height} steps"


def test_first_screen_says_what_was_sampled(many_steps: Path) -> None:
    n = kinetolens.load(many_steps).steps.height
    screen = CliRunner().invoke(cli, ["summary", "--width", "200", str(many_steps)])
    assert screen.exit_code == 0, screen.output
    head, _, advice = screen.output.partition("What to change first")
    assert advice.splitlines()[1] == f"savings simulated on {SAMPLE_STEPS} of {n} steps (evenly spaced over the trace)"
    data = json.loads(CliRunner().invoke(cli, ["summary", "--json", str(many_steps)]).output)
    assert {f["simulated_on"] for f in data["recommendations"] if f["predicted_step_ms"] is not None} == {f"{SAMPLE_STEPS} of {n} steps"}
