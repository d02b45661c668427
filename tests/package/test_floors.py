"""The declared dependency ranges are true.

.ci/run installs the floors declared here into a venv of their own and runs
the analyzer's tests there; these checks keep the declaration honest where
that run cannot: a floor below an API the code relies on, and no upper bound.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import msgspec
import polars as pl

ROOT = Path(__file__).resolve().parents[2]
DEPS = {
    re.split(r"[<>=!~ \[]", d)[0]: d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def _bounds(spec: str) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    low = re.search(r">=\s*([\d.]+)", spec)
    high = re.search(r"<\s*([\d.]+)", spec)
    assert low, spec
    return _version(low[1]), _version(high[1]) if high else None


def test_polars_floor_covers_the_apis_used_and_the_next_major_is_excluded() -> None:
    low, high = _bounds(DEPS["polars"])
    # join(nulls_equal=...) appeared in polars 1.24 and the code uses it;
    # .ci/run found 1.44.2 the lowest release the analyzer's tests pass on.
    assert any("nulls_equal=" in p.read_text() for p in (ROOT / "src/kinetolens").rglob("*.py"))
    assert low >= (1, 24)
    # The main run installs the newest polars, 2.x; 3.0 may break anything.
    assert high == (3,)


def test_installed_versions_are_within_the_declared_ranges() -> None:
    for name, installed in (("polars", pl.__version__), ("msgspec", msgspec.__version__)):
        low, high = _bounds(DEPS[name])
        assert _version(installed) >= low, (name, installed)
        assert high is None or _version(installed) < high, (name, installed)
