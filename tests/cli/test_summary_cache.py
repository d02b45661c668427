"""A second ``kinetolens summary`` of a trace reads the summary its cache entry
keeps instead of running the recommendation rules and their what-if
simulations again, and prints the same thing."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

import kinetolens.analysis.advice.recommendations as recommendations
import kinetolens.analysis.paths.whatif as whatif
from kinetolens.cache import DERIVED_SUFFIX
from kinetolens.cli.main import cli
from tests.conftest import trace_path

TRACE = "hta/df_index_resolver/df_index_resolver.json.gz"  # 54 MB; its recommendations simulate their savings


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often the rules and the simulator ran (they still run for real)."""
    counts: Counter[str] = Counter()

    def counted(module: object, name: str) -> None:
        real = getattr(module, name)

        def wrapper(*args: object, **kwargs: object) -> object:
            counts[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counted(recommendations, "findings")
    counted(whatif, "whatif_many")
    return counts


def _summary(cache_dir: Path, *args: str) -> str:
    result = CliRunner().invoke(
        cli, ["summary", str(trace_path(TRACE)), "-w", "120", *args], env={"KINETOLENS_CACHE_DIR": str(cache_dir)}
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_second_summary_reads_the_cached_summary(tmp_path: Path, calls: Counter[str]) -> None:
    first = _summary(tmp_path)
    assert calls["findings"] == 1 and calls["whatif_many"] >= 1  # the cold run simulates
    assert len(list(tmp_path.glob(f"*/summary{DERIVED_SUFFIX}"))) == 1
    calls.clear()
    assert _summary(tmp_path) == first
    assert _summary(tmp_path, "--json").startswith("{")
    assert calls == Counter()  # neither the rules nor the simulator ran again


def test_damaged_cached_summary_is_recomputed(tmp_path: Path, calls: Counter[str]) -> None:
    first = _summary(tmp_path)
    (stored,) = tmp_path.glob(f"*/summary{DERIVED_SUFFIX}")
    stored.write_bytes(stored.read_bytes().replace(b'"kind"', b'"kinx"', 1))  # still JSON, not its bytes
    calls.clear()
    assert _summary(tmp_path) == first
    assert calls["findings"] == 1  # the checksum failed: recomputed, not read


def _report(cache_dir: Path, out: Path) -> str:
    result = CliRunner().invoke(cli, ["report", str(trace_path(TRACE)), "-o", str(out)], env={"KINETOLENS_CACHE_DIR": str(cache_dir)})
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def test_a_report_after_a_summary_reads_its_summary(tmp_path: Path, calls: Counter[str]) -> None:
    # The report shows the summary's recommendations with their simulated
    # savings: after `kinetolens summary` it reads them from the cache entry,
    # and the page is the one a report computing everything itself writes.
    cold = _report(tmp_path / "cold", tmp_path / "cold.html")
    assert calls["findings"] == 1 and calls["whatif_many"] >= 1
    assert len(list((tmp_path / "cold").glob(f"*/summary{DERIVED_SUFFIX}"))) == 1  # a later summary reads it
    _summary(tmp_path / "warm")
    calls.clear()
    assert _report(tmp_path / "warm", tmp_path / "warm.html") == cold
    assert calls == Counter()  # neither the rules nor the simulator ran for the report
    _summary(tmp_path / "cold")
    assert calls == Counter()  # nor for a summary after the report
