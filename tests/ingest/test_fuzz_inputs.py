"""Seeded fuzzing of ``kinetolens summary`` on damaged copies of real traces.

A short campaign of ``bench/fuzz_inputs.py`` (which holds the mutators and
the judge; ``python bench/fuzz_inputs.py -n 1000`` runs a long one): byte
flips, cuts, values of the wrong type or out of range, deep nesting, gzip
bombs, empty files, bad text and wild Nsight values, applied to small
Kineto ``.json``/``.json.gz`` and Nsight ``.sqlite`` traces.  Every mutant
must load with sane numbers or be refused in one line naming the file with
exit status 2: never a traceback, another exit status, or a hang.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import fuzz_inputs

#: Mutants per run: each class several times, about a minute on two busy cores.
N = 270
SEED = 20


@pytest.fixture(scope="module")
def results() -> list[fuzz_inputs.Result]:
    return fuzz_inputs.campaign(SEED, N, workers=2, timeout=30.0)


def test_every_mutant_loads_sanely_or_is_refused_in_one_line(results: list[fuzz_inputs.Result]) -> None:
    assert len(results) == N
    bad = [f"{r.outcome}: {r.mutant.klass} of {r.mutant.base} ({r.mutant.detail}): {r.why}" for r in results
           if r.outcome not in fuzz_inputs.GOOD]
    assert not bad, "\n" + "\n".join(bad) + "\n\n" + fuzz_inputs.table(results)


def test_every_class_and_format_was_exercised(results: list[fuzz_inputs.Result]) -> None:
    assert {r.mutant.klass for r in results} == set(fuzz_inputs.CLASSES)
    assert {r.mutant.base for r in results} == {"kineto-json", "kineto-gz", "nsys"}
    assert {r.outcome for r in results} == {"loaded", "rejected"}


@pytest.mark.parametrize(
    ("summary", "insane"),
    [
        ({"span_us": 4.0e15}, "span_us"),
        ({"gpu": [{"utilization": 1.0002}]}, "utilization"),
        ({"steps": {"breakdown_us": [{"kernel": -3.0}]}}, "kernel"),
        ({"span_us": float("nan")}, "span_us"),
    ],
)
def test_the_judge_catches_impossible_numbers(summary: dict[str, object], insane: str) -> None:
    import json

    outcome, why = fuzz_inputs.judge("t.json", 0, json.dumps(summary), "")
    assert outcome == "insane-numbers" and insane in why


@pytest.mark.parametrize(
    ("rc", "err", "outcome"),
    [
        (2, "kinetolens: error: t.json: bad\n", "rejected"),
        (2, "kinetolens: error: t.json: bad\nmore\n", "bad-message"),
        (2, "kinetolens: error: other.json: bad\n", "bad-message"),
        (1, "Traceback (most recent call last):\n  ...\nRecursionError: x\n", "traceback"),
        ("hang", "", "hang"),
        (1, "kinetolens: error: out of memory\n", "other-exit"),
    ],
)
def test_the_judge_names_each_failure(rc: object, err: str, outcome: str) -> None:
    assert fuzz_inputs.judge("t.json", rc, "", err)[0] == outcome
