"""The one JSON encoder: typed results, tables and plain values are written
the same way everywhere, and a typed result reads back into its type."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import msgspec
import polars as pl
import pytest

import kinetolens
from kinetolens import json_codec
from kinetolens.analysis.summary import summarize
from kinetolens.analysis.summary_types import Summary
from kinetolens.derived import load_derived
from tests.conftest import trace_path


@dataclass(frozen=True)
class Row:
    name: str
    us: float | None


def test_tables_paths_and_results_encode_as_plain_json() -> None:
    value = {
        "table": pl.DataFrame({"name": ["a", "b"], "us": [1.5, None]}),
        "rows": (Row("k", 2.0),),
        "path": Path("/tmp/x.json"),
        "nan": math.nan,
    }
    assert json_codec.to_builtins(value) == {
        "table": [{"name": "a", "us": 1.5}, {"name": "b", "us": None}],
        "rows": [{"name": "k", "us": 2.0}],
        "path": "/tmp/x.json",
        "nan": None,  # JSON has no NaN: a missing figure is null
    }
    assert json_codec.encode(value, indent=2).count(b"\n") > 5  # for people: a field a line


def test_a_table_written_by_polars_is_the_bytes_of_its_python_rows() -> None:
    # Tables of numbers, text, booleans and categories (and lists and structs
    # of them) are written by polars itself: the bytes must be msgspec's of
    # the rows, non-finite floats as null, a 32-bit float as its 64-bit
    # value; tables it would write otherwise (times, 32-bit floats in a list)
    # go through Python rows.
    table = pl.DataFrame({
        "f": [1.0, math.nan, math.inf, None, 1e-7, 0.1 + 0.2],
        "f32": pl.Series([1 / 3, 2.25, None, 0.0, 1.0, 4.5], dtype=pl.Float32),
        "i": [1, None, 2**62, -5, 0, 7],
        "s": ["a", None, 'e\u0301"\\\n\t\x01', "", "💥", "1e+5"],
        "b": [True, False, None, True, True, False],
        "l": [[1.0, 2.5], None, [], [3.0], [4.0], [5.0]],
        "st": [{"a": 1, "b": "x"}] * 6,
        "c": pl.Series(["u", "v", "u", None, "v", "u"], dtype=pl.Categorical),
    })
    others = [
        table.with_columns(t=pl.Series([1] * 6).cast(pl.Datetime("ns"))),
        table.with_columns(l32=pl.Series([[1 / 3]] * 6, dtype=pl.List(pl.Float32))),
    ]
    for frame in (table, *others):
        assert json_codec.encode(frame) == msgspec.json.encode(frame.to_dicts())


def test_an_unknown_object_is_an_error_not_its_repr() -> None:
    with pytest.raises(TypeError, match="cannot write a object as JSON"):
        json_codec.encode({"x": object()})


def test_a_result_decodes_into_its_type_and_refuses_another_shape() -> None:
    data = json_codec.encode((Row("k", None),))
    assert json_codec.decode(data, tuple[Row, ...]) == (Row("k", None),)
    with pytest.raises(msgspec.ValidationError):
        json_codec.decode(b'[{"name": 3, "us": 1.0}]', tuple[Row, ...])


def test_summary_from_the_cache_is_the_summary_computed(tmp_path: Path) -> None:
    # The second call reads the stored JSON back into a Summary; every field,
    # nested rows and findings included, equals the one computed from the trace.
    path = trace_path("tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz")
    first = load_derived(path, "summary", summarize, Summary, cache=tmp_path)
    again = load_derived(path, "summary", summarize, Summary, cache=tmp_path)
    assert isinstance(again, Summary) and again == first
    assert again.inference.phases[0].average_us.total == pytest.approx(again.inference.phases[0].mean_us)
    assert first == summarize(kinetolens.load(path, cache=False))
