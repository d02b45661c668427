"""Shared fixtures: the real traces and golden figures beside the checkout."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.compiled_model import capture_compiled

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRACES = SHARED / "traces"
GOLDEN = SHARED / "golden"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test session caches into its own directory, never ~/.cache."""
    monkeypatch.setenv("KINETOLENS_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], Path]:
    """The compiled CPU model's capture (tests/compiled_model.py), compiled
    once per session for every test that reads it."""
    return capture_compiled(tmp_path_factory.mktemp("compiled_attr"))


def trace_path(rel: str) -> Path:
    path = TRACES / rel
    if not path.exists():
        pytest.fail(f"missing fixture {path}: ../shared must sit beside the checkout")
    return path


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
    "views/test_glance_names.py": "Chromium",
    "views/test_glance_ranks.py": "Chromium and generated runs",
    "views/test_report.py": "Chromium screenshots",
    "views/test_report_sections.py": "Chromium and a gloo run",
    "views/test_critical_path_views.py": "Chromium",
    "views/test_cross_rank_path_views.py": "Chromium and generated runs",
    "runs/test_many_ranks.py": "hundreds of generated ranks",
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
    root = Path(__file__).resolve().parent
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(root).as_posix()
        fixtures = set(getattr(item, "fixturenames", ()))
        if rel.startswith(SLOW_FOLDERS) or rel in SLOW_MODULES or fixtures & SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)
