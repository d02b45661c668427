"""Shared fixtures: the real traces and golden figures beside the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRACES = SHARED / "traces"
GOLDEN = SHARED / "golden"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test session caches into its own directory, never ~/.cache."""
    monkeypatch.setenv("KINETOLENS_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def trace_path(rel: str) -> Path:
    path = TRACES / rel
    if not path.exists():
        pytest.fail(f"missing fixture {path}: ../shared must sit beside the checkout")
    return path
