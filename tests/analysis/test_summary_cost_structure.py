"""What a summary's cost is made of, checked by structure rather than by timing:
the recommendations' what-if re-times a bounded sample of the steps (at most
one in SAMPLE_SHARE and SAMPLE_STEPS in all), spread over the trace, one
step's graph at a time, stops once every saving is known to 1% of the step,
and the summary says what was sampled."""

from __future__ import annotations

import dataclasses
import json
import weakref
from pathlib import Path

import pytest
from click.testing import CliRunner

import kinetolens
from kinetolens.analysis.advice.recommendations import recommendations
from kinetolens.analysis.paths import whatif as whatif_module
from kinetolens.analysis.paths.sampling import MIN_STEPS, SAMPLE_SHARE, SAMPLE_STEPS, SAMPLING, SETTLED_SHARE, sample, sample_in_words, sample_size
from kinetolens.analysis.paths.whatif import parse_change, settled, spread_order, whatif_many
from kinetolens.cli.main import cli
from tests.conftest import trace_path



def test_sample_is_evenly_spaced_with_both_ends() -> None:
    assert sample(60, 8) == [0, 8, 17, 25, 34, 42, 51, 59]
    assert sample(5, 8) == [0, 1, 2, 3, 4]
    assert sample(5, None) == [0, 1, 2, 3, 4]


def test_the_sample_is_one_step_in_the_share_at_least_one_at_most_the_cap() -> None:
    assert [sample_size(n) for n in (0, 1, 5, SAMPLE_SHARE - 1, 2 * SAMPLE_SHARE - 1, 2 * SAMPLE_SHARE, 3 * SAMPLE_SHARE)] == [0, 1, 1, 1, 1, 2, 3]
    assert sample_size(SAMPLE_SHARE * SAMPLE_STEPS) == sample_size(1000) == SAMPLE_STEPS
    assert sample_size(5, share=None) == 5 and sample_size(60, share=None) == SAMPLE_STEPS
    # One step is the middle one.
    assert sample(5, sample_size(5)) == [2]


def test_every_prefix_of_the_order_is_spread_over_the_trace() -> None:
    order = spread_order(sample(60, 8))
    assert sorted(order) == sample(60, 8)
    # The middle, then both ends: the fewest steps the what-if may stop at see the whole trace.
    assert order[:3] == [34, 0, 59]
    assert spread_order([0, 1, 2, 3, 4])[:3] == [2, 0, 4]
    assert spread_order([]) == []


def test_settled_asks_for_a_spread_under_the_share_of_the_step() -> None:
    step_us = 100_000.0
    assert not settled([[-500.0] * (MIN_STEPS - 1)], step_us)  # too few steps to judge the spread
    assert settled([[-500.0] * MIN_STEPS, [0.0] * MIN_STEPS], step_us)
    # Standard error 0.577% of the step (sd 1,000 us over sqrt(3)): settled at 1%, not at 0.5%.
    assert settled([[-1000.0, 0.0, 1000.0]], step_us)
    assert not settled([[-1000.0, 0.0, 1000.0]], step_us, share=0.005)
    # One change set that has not settled keeps every set going.
    assert not settled([[0.0, 0.0, 0.0], [-10_000.0, 0.0, 10_000.0]], step_us)


def test_recommendations_retime_at_most_the_sample_one_step_at_a_time(many_steps: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = kinetolens.load(many_steps, cache=False)
    assert trace.steps.height > SAMPLE_STEPS
    # Under the share alone the 14 steps would be re-timed on the middle one; the
    # structure (streamed, spread, both ends, stopped once settled) is that of a
    # sample of several, so the share is lifted here (the next tests hold it).
    real_whatif_many = whatif_module.whatif_many
    monkeypatch.setattr(whatif_module, "whatif_many", lambda *a, **k: real_whatif_many(*a, **{**k, "share": None}))
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
    k = len(steps)
    # Every step is prepared once, re-timed once per change set, and at most the sample's size of them.
    assert MIN_STEPS <= k <= SAMPLE_STEPS < trace.steps.height
    assert len(prepared) == k
    assert len(retimed) == len(set(retimed)) == k * len({specs for _, specs in retimed})
    # Streamed: when a step is prepared, no earlier step's prepared graph is still held.
    assert alive_at_prepare == [0] * k
    ordered = sorted(trace.steps["step"].to_list())
    assert min(steps) == ordered[0] and max(steps) == ordered[-1]
    simulated = [f for f in found if f.predicted_step_ms is not None]
    assert all(f.simulated_on == f"{k} of {trace.steps.height} steps" for f in simulated)
    assert all(f"{k} of {trace.steps.height} steps ({SAMPLING})" in f.estimate for f in simulated)


def test_whatif_many_without_a_bound_retimes_every_step(many_steps: Path) -> None:
    trace = kinetolens.load(many_steps)
    launch = [[parse_change("launch:0")]]
    (all_steps,) = whatif_many(trace, launch, paths=False, max_steps=None)
    assert len(all_steps.steps) == all_steps.of == trace.steps.height and all_steps.sampled is None
    # The default: one step in SAMPLE_SHARE, the middle one of these 14.
    (shared,) = whatif_many(trace, launch, paths=False)
    middle = sorted(trace.steps["step"].to_list())[trace.steps.height // 2]
    assert [s.window.step for s in shared.steps] == [middle] and shared.sampled == f"1 of {trace.steps.height} steps"
    (bound,) = whatif_many(trace, launch, paths=False, settle=None, share=None)
    assert len(bound.steps) == SAMPLE_STEPS and bound.sampled == f"{SAMPLE_STEPS} of {trace.steps.height} steps"
    # Launch overhead costs each step alike: the first three steps settle it, and their
    # mean is the mean over every step within the share of the step the rule asks for.
    (early,) = whatif_many(trace, launch, paths=False, share=None)
    assert len(early.steps) == MIN_STEPS and early.sampled == f"{MIN_STEPS} of {trace.steps.height} steps"
    assert [s.window.start for s in early.steps] == sorted(s.window.start for s in early.steps)
    assert abs(early.delta_us - all_steps.delta_us) <= 2 * SETTLED_SHARE * all_steps.measured_us


def test_an_outlying_step_keeps_the_whatif_going() -> None:
    # df_index_resolver: without data loading and host work, four of its five steps
    # save 143-164 ms and the last 74.6 ms.  The middle and first steps agree to
    # 0.6 ms; stopping there (two steps) would put the saving 10 ms (3% of the step)
    # off.  The last step is the third one re-timed, and its spread keeps all five.
    # (The summary's default re-times one step in SAMPLE_SHARE: here the middle
    # one, whose saving is 10.7 ms, 3% of the step, above the five steps' mean;
    # the first screen says "1 of 5 steps".)
    trace = kinetolens.load(trace_path("hta/df_index_resolver/df_index_resolver.json.gz"))
    host = [[parse_change("category:data_loading=0"), parse_change("category:cpu=0")]]
    (settled_run,) = whatif_many(trace, host, paths=False, share=None)
    (every,) = whatif_many(trace, host, paths=False, max_steps=None)
    assert len(settled_run.steps) == len(every.steps) == 5
    assert settled_run.delta_us == every.delta_us
    effects = sorted((s.predicted_us - s.measured_us) / 1000 for s in every.steps)
    assert effects[-1] == pytest.approx(-74.6, abs=0.1) and effects[-2] < -140
    (first_screen,) = whatif_many(trace, host, paths=False)
    assert first_screen.sampled == "1 of 5 steps" and first_screen.steps[0].window.step == every.steps[2].window.step
    assert first_screen.delta_us == every.steps[2].predicted_us - every.steps[2].measured_us


def test_a_window_of_a_longer_file_takes_the_share_of_the_files_steps(many_steps: Path, tmp_path: Path) -> None:
    # A trace read a step window at a time gives its recommendations from a
    # window of up to SAMPLE_STEPS whole steps: the share is of the file's steps,
    # not the window's (one step in SAMPLE_SHARE of the window would re-time one
    # step of a file of a thousand).
    from kinetolens.runs.windowed_read import steps_in_windows

    read = steps_in_windows(many_steps, None, spill_root=tmp_path)
    assert read is not None
    window, file_steps = read.trace, kinetolens.load(many_steps, cache=False)
    assert file_steps.window_of_steps is None
    assert window.window_of_steps == file_steps.steps.height == 14 and window.steps.height == SAMPLE_STEPS
    launch = [[parse_change("launch:0")]]
    # 14 steps in the file: one in SAMPLE_SHARE is one, as read whole.
    (as_file,) = whatif_many(window, launch, paths=False, settle=None)
    assert as_file.sampled == f"1 of {SAMPLE_STEPS} steps"
    # A file of SAMPLE_SHARE * SAMPLE_STEPS steps or more: every step of the window.
    longer = dataclasses.replace(window, window_of_steps=SAMPLE_SHARE * SAMPLE_STEPS)
    (every,) = whatif_many(longer, launch, paths=False, settle=None)
    assert len(every.steps) == SAMPLE_STEPS and every.sampled is None
    # The window alone (as if it were the file) would be re-timed on one step.
    (alone,) = whatif_many(dataclasses.replace(window, window_of_steps=None), launch, paths=False, settle=None)
    assert len(alone.steps) == 1


def test_first_screen_says_what_was_sampled(many_steps: Path) -> None:
    n = kinetolens.load(many_steps).steps.height
    screen = CliRunner().invoke(cli, ["summary", "--width", "200", str(many_steps)])
    assert screen.exit_code == 0, screen.output
    head, _, advice = screen.output.partition("What to change first")
    data = json.loads(CliRunner().invoke(cli, ["summary", "--json", str(many_steps)]).output)
    (sampled,) = {f["simulated_on"] for f in data["recommendations"] if f["predicted_step_ms"] is not None}
    assert sampled == f"{sample_size(n)} of {n} steps"
    # 14 steps: the middle one, said so in words that wrap at the terminal's width.
    assert sampled == f"1 of {n} steps"
    said = " ".join(advice.splitlines()[1:3])
    assert said.startswith(f"savings simulated on the middle one of {n} steps (one step in {SAMPLE_SHARE} at most; kinetolens whatif takes every step)")
    assert sample_in_words("3 of 60 steps") == f"3 of 60 steps ({SAMPLING})"


def test_a_change_that_matches_nothing_runs_no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    # df_index_resolver has no DataLoader time: "no data loading" re-times nothing
    # there, and each step's replay is the measured one: no longest-path search
    # at all (the measured replay's end is read off the measured times).
    trace = kinetolens.load(trace_path("hta/df_index_resolver/df_index_resolver.json.gz"))
    searches: list[int] = []
    real_run = whatif_module._run

    def counting_run(*args: object, **kwargs: object) -> object:
        searches.append(1)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(whatif_module, "_run", counting_run)
    (idle,) = whatif_many(trace, [[parse_change("category:data_loading=0")]], paths=False, max_steps=None)
    assert idle.matched == {"category:data_loading=0": 0}
    assert all(s.predicted_us == s.measured_us for s in idle.steps)
    assert len(idle.steps) == 5 and searches == []
    (launch,) = whatif_many(trace, [[parse_change("launch:0")]], paths=False, max_steps=None)
    assert len(searches) == 5 and launch.delta_us < 0


@pytest.mark.parametrize(
    "name",
    ["hta/df_index_resolver/df_index_resolver.json.gz", "hta/trace_diff/control/control.json.gz", "hta/nccl_parser_config/nccl_data.json.gz"],
)
def test_the_measured_replay_ends_where_the_search_says(name: str) -> None:
    # prepare() reads the unchanged replay's end off the measured times instead
    # of searching: exact only because every node's residual makes up what its
    # dependencies leave unexplained.  A search over the measured weights must agree.
    trace, windows = whatif_module._windows(kinetolens.load(trace_path(name)), None)
    replays = list(whatif_module.iter_replays(trace, windows))
    assert replays
    for r in replays:
        searched, _ = whatif_module._run(r, r.weight, path=False)
        assert r.base_ns == searched > 0
