"""Every kinetolens error crosses a process boundary whole: a worker of a
process pool (``--executor local:N``) raises, the parent reports it."""

from __future__ import annotations

import importlib
import inspect
import os
import pickle
import pkgutil
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytest

import kinetolens
from kinetolens.errors import TraceError
from tests.conftest import trace_path

RANK0 = "hta/trace_filter/sampled_rank-0.json.gz"

#: A value for each constructor parameter, by its annotation.
SAMPLES = {"str": "a value", "list": [1, "two"], "dict": {"state": "queued", "waited_s": 1.5}, "int": 7, "Path": "/x/t.json"}


def _error_classes() -> list[type[BaseException]]:
    found = set()
    for info in pkgutil.walk_packages(kinetolens.__path__, "kinetolens."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__.startswith("kinetolens."):
                found.add(obj)
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def _instance(cls: type[BaseException]) -> BaseException:
    params = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]
    if all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return cls("what went wrong")
    args = []
    for p in params:
        annotation = str(p.annotation)
        kind = next((k for k in SAMPLES if annotation.startswith(k) or f"| {k}" in annotation or f"{k} |" in annotation), "str")
        args.append(SAMPLES[kind])
    return cls(*args)


def _state(err: BaseException) -> tuple[Any, ...]:
    return (type(err), str(err), err.args, dict(vars(err)))


def test_there_are_error_classes_to_check() -> None:
    names = {c.__name__ for c in _error_classes()}
    assert {"TraceError", "EmptyWindow", "ColumnError", "Failed", "Pending", "FormulaError"} <= names


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_error_survives_pickling(cls: type[BaseException]) -> None:
    err = _instance(cls)
    err.note = "added after raising"  # type: ignore[attr-defined]
    again = pickle.loads(pickle.dumps(err))
    assert _state(again) == _state(err)


def _raise_trace_error(path: str) -> None:
    err = TraceError(path, "not a   trace\n(bad header)")
    err.rank = 3  # type: ignore[attr-defined]
    raise err


def test_a_trace_error_raised_in_a_worker_process_reaches_the_parent() -> None:
    with ProcessPoolExecutor(max_workers=2, mp_context=get_context("spawn")) as pool:
        future = pool.submit(_raise_trace_error, "/runs/r/rank-3.json")
        with pytest.raises(TraceError) as caught:
            future.result(timeout=120)
        # the pool still works: it was not broken by the error
        assert pool.submit(len, "abc").result(timeout=120) == 3
    err = caught.value
    assert (err.path, err.problem, str(err)) == ("/runs/r/rank-3.json", "not a trace (bad header)", "/runs/r/rank-3.json: not a trace (bad header)")
    assert err.rank == 3  # type: ignore[attr-defined]


def test_dist_with_a_local_pool_names_the_corrupt_rank_in_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(trace_path(RANK0), run / "rank-0.json.gz")
    bad = run / "rank-1.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "aten::mm", ')
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "KINETOLENS_CACHE_DIR": str(tmp_path / "cache")}
    # --strict: the bad rank's error crosses the pool whole and stops the command in one line
    done = subprocess.run([sys.executable, "-m", "kinetolens.cli.main", "dist", str(run), "--executor", "local:2", "--strict"],
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert "Traceback" not in done.stderr and "BrokenProcessPool" not in done.stderr, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(bad) in lines[0], lines
    assert done.returncode == 2
