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
