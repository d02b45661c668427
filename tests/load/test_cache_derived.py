"""Derived results kept beside a cache entry's tables (``cache.read_derived``):
read back only for the entry, basis and bytes they were written with, and
removed with their entry."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kinetolens.cache import CHECKSUM, DERIVED_SUFFIX, read_derived, remove_entry, write_derived

KEY = "0123456789abcdef0123456789abcdef"


@dataclass(frozen=True)
class Result:
    count: int
    ids: tuple[int, ...]
    saving_us: float


@dataclass(frozen=True)
class OlderResult:
    """What an earlier version stored under the same name: another shape."""

    count: int
    mean_us: float


VALUE = Result(count=5, ids=(1, 2, 3), saving_us=12.5)


def _entry(tmp_path: Path, checksum: str = "aaaa") -> Path:
    entry = tmp_path / KEY
    entry.mkdir(exist_ok=True)
    (entry / CHECKSUM).write_text(checksum, "ascii")
    return entry


def test_derived_result_reads_back_for_its_entry_and_basis(tmp_path: Path) -> None:
    entry = _entry(tmp_path)
    write_derived(entry, "summary", "basis-1", VALUE)
    assert read_derived(entry, "summary", "basis-1", Result) == VALUE
    assert read_derived(entry, "summary", "basis-2", Result) is None  # other analyses' code or run metadata
    assert read_derived(entry, "recommendations", "basis-1", Result) is None  # never written
    # a result of another shape (written by other code) is recomputed, never half-read
    assert read_derived(entry, "summary", "basis-1", OlderResult) is None


def test_derived_result_of_a_rebuilt_entry_is_not_read(tmp_path: Path) -> None:
    entry = _entry(tmp_path)
    write_derived(entry, "summary", "b", VALUE)
    _entry(tmp_path, checksum="bbbb")  # the tables were written again, other bytes
    assert read_derived(entry, "summary", "b", Result) is None


def test_derived_result_with_other_bytes_is_not_read(tmp_path: Path) -> None:
    entry = _entry(tmp_path)
    write_derived(entry, "summary", "b", VALUE)
    stored = entry / f"summary{DERIVED_SUFFIX}"
    stored.write_bytes(stored.read_bytes().replace(b"12.5", b"99.5"))  # still JSON
    assert read_derived(entry, "summary", "b", Result) is None


def test_derived_result_goes_with_its_entry(tmp_path: Path) -> None:
    entry = _entry(tmp_path)
    write_derived(entry, "summary", "b", VALUE)
    assert remove_entry(entry)  # the cache still owns an entry holding a derived result
    assert not entry.exists()


def test_no_entry_stores_nothing(tmp_path: Path) -> None:
    write_derived(tmp_path / KEY, "summary", "b", VALUE)  # the entry could not be written
    assert not (tmp_path / KEY).exists()
