"""Shared fixtures: the real traces and golden figures beside the checkout.

The trace corpus lives in ``../shared`` (see the README). Without it the
suite still collects; every test that reads the corpus skips with one reason
(``CORPUS_MISSING``), unless KINETOLENS_REQUIRE_CORPUS=1 asks for failures.
"""

from __future__ import annotations

import os
import shutil
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.compiled_model import capture_compiled

TESTS = Path(__file__).resolve().parent
SHARED = TESTS.parent.parent / "shared"
TRACES = SHARED / "traces"
GOLDEN = SHARED / "golden"
#: The H100 Qwen1.5-0.5B inference trace: one step, with its nn.Module tree.
QWEN_H100 = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
CORPUS_MISSING = "../shared (the trace corpus) is not beside the checkout"
#: True where the corpus is absent and absence should skip, not fail.
SKIP_CORPUS = not TRACES.is_dir() and os.environ.get("KINETOLENS_REQUIRE_CORPUS") != "1"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test session caches into its own directory, never ~/.cache."""
    monkeypatch.setenv("KINETOLENS_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], Path]:
    """The compiled CPU model's capture (tests/compiled_model.py), compiled
    once per session for every test that reads it."""
    return capture_compiled(tmp_path_factory.mktemp("compiled_attr"))


@pytest.fixture(scope="session")
def many_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real trace's two steps repeated by bench/gen_trace.py: 14 complete
    steps, more than the analyses that sample steps take (SAMPLE_STEPS)."""
    import runpy

    out = tmp_path_factory.mktemp("many_steps") / "many_steps.json"
    gen = runpy.run_path(str(TESTS.parent / "bench" / "gen_trace.py"))
    gen["main"](["--source", str(trace_path("hta/trace_filter/sampled_rank-0.json.gz")), "--size-mb", "12", "-o", str(out)])
    return out


@pytest.fixture(scope="session")
def qwen_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The H100 Qwen trace's step repeated five times (bench/gen_trace.py).

    Its 509 kernels without a recorded launch (the previous iteration
    draining when profiling began) are left out (``--launched-only``):
    kinetolens names them after the first step's launches, which holds where
    they are, before the first step; repeated, they would sit inside later
    steps, which no profiler writes."""
    import gzip
    import json
    import runpy

    if SKIP_CORPUS:
        pytest.skip(CORPUS_MISSING)
    folder = tmp_path_factory.mktemp("qwen_steps")
    gen = runpy.run_path(str(TESTS.parent / "bench" / "gen_trace.py"))
    events = json.loads(gzip.decompress(trace_path(QWEN_H100).read_bytes()))["traceEvents"]
    assert len(events) - len(gen["launched_only"](events)) == 509
    out = folder / "qwen_steps.json"
    gen["main"](["--source", str(trace_path(QWEN_H100)), "--launched-only", "--size-mb", "25", "-o", str(out)])
    return out


def trace_path(rel: str) -> Path:
    """A corpus file; without the corpus the path is returned unchecked (its tests are skipped)."""
    path = TRACES / rel
    if not path.exists() and not SKIP_CORPUS:
        pytest.fail(f"missing fixture {path}: ../shared must sit beside the checkout")
    return path


def _in_corpus(value: object) -> bool:
    return (isinstance(value, Path) and value.is_relative_to(SHARED)) or (
        isinstance(value, str) and value.startswith(str(SHARED))
    )


def _reads_corpus(obj: object, seen: set[int]) -> bool:
    """Whether ``obj`` (a test, fixture or helper, a path or a container of them)
    names the corpus, following the functions and module globals it uses."""
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    if obj is trace_path or _in_corpus(obj):
        return True
    if isinstance(obj, (list, tuple, set, frozenset)):
        return any(_reads_corpus(v, seen) for v in obj)
    if isinstance(obj, dict):
        return any(_reads_corpus(v, seen) for v in obj.values())
    if type(obj).__name__ == "ParameterSet":
        return _reads_corpus(obj.values, seen)  # type: ignore[attr-defined]
    func = getattr(obj, "__wrapped__", obj)
    func = getattr(func, "__func__", func)
    if not isinstance(func, types.FunctionType) or not func.__module__.startswith(("tests", "test_", "conftest")):
        return False
    return any(_reads_corpus(func.__globals__[n], seen) for n in _names(func.__code__) if n in func.__globals__)


def _names(code: types.CodeType) -> Iterator[str]:
    """Global names a function's code (and its nested lambdas and comprehensions) reads."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def _skip_without_corpus(items: list[pytest.Item]) -> None:
    """Without the corpus, skip each test that reads it, with one reason."""
    if not SKIP_CORPUS:
        return
    skip = pytest.mark.skip(reason=CORPUS_MISSING)
    for item in items:
        seen: set[int] = set()
        fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        used = [getattr(item, "function", None), *(d.func for defs in fixtures.values() for d in defs)]
        params = list(getattr(getattr(item, "callspec", None), "params", {}).values())
        if any(_reads_corpus(v, seen) for v in used + params):
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Without the corpus, a test that failed opening a corpus file is a skip too."""
    outcome = yield
    report = outcome.get_result()
    if SKIP_CORPUS and report.failed and call.excinfo is not None and str(SHARED) in str(call.excinfo.value):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {CORPUS_MISSING}")


def backward_roots(ops: pl.DataFrame) -> list[int | None]:
    """The outermost backward op above every backward op (None elsewhere).

    Written independently of the model's own rule, so tests can check it.
    """
    parents = ops["parent_id"].to_list()
    backward = (ops["direction"] == "bprop").to_list()
    root: list[int | None] = [None] * ops.height
    for i in range(ops.height):
        if backward[i]:
            p = parents[i]
            root[i] = root[p] if p is not None and root[p] is not None else i
    return root


def place(dst: Path, src: Path) -> None:
    """A copy of the trace (or folder) ``src`` at ``dst``: the dashboard serves
    only files inside its logdir, so a link out to ../shared would not do."""
    if Path(src).is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copyfile(src, dst)


# -- the slow marker -------------------------------------------------------------
# `python -m pytest -q -m "not slow"` runs the analyzer's tests; the README's
# command runs everything.  Slow: tests that drive a real browser, capture
# with torch, start processes by the dozen or a cluster, or sweep the whole
# corpus through every analysis.

#: Folders (under tests/) whose every test is slow: torch captures, the dashboard in Chromium.
SLOW_FOLDERS = ("capture/", "views/dashboard/", "gpu/")
#: Modules whose every test is slow, with why.
SLOW_MODULES = {
    "views/test_glance.py": "Chromium",
    "analysis/ranks/test_pipeline.py": "a two-process torch pipelining job",
    "analysis/ranks/test_mesh_capture.py": "a four-process DeviceMesh job (FSDP2 and tensor parallel)",
    "views/test_pages_fit.py": "Chromium",
    "views/test_glance_names.py": "Chromium",
    "views/test_glance_ranks.py": "Chromium and generated runs",
    "views/test_report.py": "Chromium screenshots",
    "views/test_report_sections.py": "Chromium and a gloo run",
    "views/test_critical_path_views.py": "Chromium",
    "views/test_cross_rank_path_views.py": "Chromium and generated runs",
    "runs/test_many_ranks.py": "hundreds of generated ranks",
    "analysis/ranks/test_hang.py": "a real gloo job that hangs until its timeout",
    "runs/test_remote_runs.py": "a Dask cluster",
    "runs/test_serve_executors.py": "a dashboard server per test",
    "runs/test_run_folders.py": "kinetolens run of a torch job",
    "analysis/paths/test_whatif_captures.py": "torch captures",
    "analysis/paths/test_cross_rank_critical_path.py": "generated runs of 64 and 256 ranks, a gloo run",
    "analysis/hardware/test_torch_compile_attribution.py": "torch.compile",
    "model/test_compiled_modules.py": "torch.compile",
    "analysis/workload/test_recompute.py": "torch captures with activation checkpointing",
    "package/test_allocator.py": "a process per allocator setting",
    "package/test_bench_compare.py": "benchmark subprocesses",
    "package/test_readme.py": "the README's capture snippet under torch",
    "ingest/test_bad_input.py": "a CLI process per bad input",
    "ingest/test_fuzz_inputs.py": "hundreds of mutants",
    "cli/test_terminal_width.py": "CLI processes at several widths",
    "analysis/test_invariants_all_traces.py": "every analysis on every trace of the corpus",
}
#: Fixtures that start a torch job of several processes or compile a model.
SLOW_FIXTURES = {"torchrun_2", "spawn_4", "slow_loader_2", "compiled"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _skip_without_corpus(items)
    root = Path(__file__).resolve().parent
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(root).as_posix()
        fixtures = set(getattr(item, "fixturenames", ()))
        if rel.startswith(SLOW_FOLDERS) or rel in SLOW_MODULES or fixtures & SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)
