"""The trace model's declared schema (kinetolens.model.schema): every table of
every loaded trace has exactly the declared columns and dtypes, fresh and
from the cache; a table that does not is refused where it is made (build,
the loader's steps) and a cache entry holding one is rebuilt; the Trace is
frozen."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import kinetolens
from kinetolens.cache import cache_key, read_keyed, remove_entry, write_keyed
from kinetolens.errors import shown_path
from kinetolens.ingest import read_raw
from kinetolens.model import build_trace
from kinetolens.model.amend import apply
from kinetolens.model.schema import SCHEMA, TABLES, SchemaMismatch, conform_trace, mismatch
from kinetolens.model.trace import Trace
from tests.conftest import trace_path

#: One or two traces of each source the model is built from.
REPRESENTATIVE = [
    "kineto_legacy/resnet50_num_workers_0_2020-12/worker0.pt.trace.json.gz",  # Kineto 2020, earlier-launch copies
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",  # Kineto 2023
    "tracelens/b300/moe_05_large_capacity/moe_05_large_capacity.json.gz",  # recent Kineto (B300)
    "tracelens/torch_compile_triton/trace.json.gz",  # ROCm, Triton
    "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz",  # CUPTI range counters
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",  # CPU only
    "nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite",  # Nsight Systems export
    "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz",  # graph replay + capture
]


def _problems(trace: Trace) -> dict[str, str]:
    return {name: p for name in TABLES if (p := mismatch(name, getattr(trace, name))) is not None}


@pytest.mark.parametrize("rel", REPRESENTATIVE)
def test_every_table_matches_the_schema_fresh_and_cached(rel: str, tmp_path: Path) -> None:
    path = trace_path(rel)
    fresh = kinetolens.load(path, cache=tmp_path)
    assert _problems(fresh) == {}
    for name in TABLES:  # in the declared order too
        assert getattr(fresh, name).columns == list(SCHEMA[name].schema), name
    entries = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1, entries  # the fresh load wrote its entry
    stored = read_keyed(tmp_path, entries[0].name, shown_path(path))
    assert stored is not None and _problems(stored) == {}
    cached = kinetolens.load(path, cache=tmp_path)
    assert _problems(cached) == {}
    for name in TABLES:
        assert_frame_equal(getattr(cached, name), getattr(fresh, name), categorical_as_str=True)


def test_graph_replay_and_earlier_launch_steps_ran() -> None:
    # the post-build steps are applied by the loader: their flags are set on real traces
    replay = kinetolens.load(trace_path(REPRESENTATIVE[-1]), cache=False)
    assert replay.ops["from_capture"].any() and "graph_capture" in replay.metadata
    legacy = kinetolens.load(trace_path(REPRESENTATIVE[0]), cache=False)
    assert legacy.ops["from_next_iteration"].any()
    assert not legacy.ops["from_capture"].any()


def test_python_source_is_always_a_column() -> None:
    # a column only Nsight exports filled is now present, null, for Kineto traces
    kineto = kinetolens.load(trace_path(REPRESENTATIVE[1]), cache=False)
    assert kineto.python.schema["source"] == pl.String
    assert kineto.python["source"].null_count() == kineto.python.height


def test_tables_cannot_be_reassigned() -> None:
    trace = kinetolens.load(trace_path(REPRESENTATIVE[1]), cache=False)
    for name in TABLES:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(trace, name, getattr(trace, name).clear())
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.metadata = {}  # type: ignore[misc]


def test_a_missing_column_or_a_wrong_dtype_is_named() -> None:
    trace = kinetolens.load(trace_path(REPRESENTATIVE[1]), cache=False)
    no_graph = dataclasses.replace(trace, kernels=trace.kernels.drop("graph_id"))
    with pytest.raises(SchemaMismatch, match=r"table 'kernels' has no column 'graph_id'"):
        conform_trace(no_graph)
    float_ts = dataclasses.replace(trace, ops=trace.ops.with_columns(pl.col("ts").cast(pl.Float64)))
    with pytest.raises(SchemaMismatch, match=r"table 'ops' column 'ts' is Float64, declared Int64"):
        conform_trace(float_ts)
    extra = dataclasses.replace(trace, steps=trace.steps.with_columns(mystery=pl.lit(1)))
    with pytest.raises(SchemaMismatch, match=r"table 'steps' has undeclared column 'mystery'"):
        conform_trace(extra)


def test_build_refuses_a_table_off_the_schema() -> None:
    # a reader that adds a device column the model does not declare breaks the kernels table
    raw = read_raw(trace_path(REPRESENTATIVE[1]))
    raw.device = raw.device.with_columns(undeclared=pl.lit(0, pl.Int64))
    with pytest.raises(SchemaMismatch, match=r"'kernels' has undeclared column 'undeclared'"):
        build_trace(raw, "broken")


def test_a_pipeline_step_that_breaks_a_table_is_refused() -> None:
    trace = kinetolens.load(trace_path(REPRESENTATIVE[1]), cache=False)

    def drops_step(t: Trace) -> Trace:
        return dataclasses.replace(t, runtime=t.runtime.drop("step"))

    with pytest.raises(SchemaMismatch, match=r"table 'runtime' has no column 'step'"):
        apply(trace, [drops_step])


def test_a_cache_entry_off_the_schema_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # an entry whose checksum and recorded dtypes agree, but whose tables are not
    # the model's (written by code with other columns), is not served
    path = trace_path(REPRESENTATIVE[1])
    good = kinetolens.load(path, cache=tmp_path)
    key = cache_key(path)
    assert remove_entry(tmp_path / key)
    broken = dataclasses.replace(good, kernels=good.kernels.drop("graph_id"))
    write_keyed(tmp_path, key, shown_path(path), broken)
    with caplog.at_level(logging.WARNING, logger="kinetolens.cache"):
        again = kinetolens.load(path, cache=tmp_path)
    assert "graph_id" in again.kernels.columns and _problems(again) == {}
    assert any("no column 'graph_id'" in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    rewritten = read_keyed(tmp_path, key, shown_path(path))
    assert rewritten is not None and _problems(rewritten) == {}


def test_help_documents_every_declared_column_with_its_dtype() -> None:
    doc = Trace.__doc__ or ""
    for table in SCHEMA.values():
        assert f"    ``{table.name}``: " in doc
        for column in table.columns:
            assert f"``{column.name}`` ({column.dtype}" in doc, (table.name, column.name)
