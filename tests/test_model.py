"""Ingest and model invariants on real traces."""

from __future__ import annotations

import os
import shutil

import polars as pl

import kinetolens
from kinetolens.cache import cache_key
from tests.conftest import TRACES


def test_epoch_timestamps_keep_nanoseconds() -> None:
    # ts is written as 1712195495519689.047 us: float64 would round it to
    # ...689.047 +- 0.125 us; we must keep every nanosecond digit.
    t = kinetolens.load(TRACES / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", cache=False)
    ts = t.ops["ts"].to_list()
    assert 1712195495519689047 in ts
    # Sub-microsecond digits survive: float64 would leave only multiples of 125 ns.
    assert any(v % 125 != 0 for v in ts)


def test_legacy_bare_array_loads_with_old_categories() -> None:
    t = kinetolens.load(TRACES / "kineto_legacy/resnet50_num_workers_0_2020-12/worker0.pt.trace.json.gz", cache=False)
    assert t.format == "kineto-legacy-array"
    assert t.kernels.filter(pl.col("kind") == "kernel").height == 9538
    assert t.ops.filter(pl.col("name") == "aten::cudnn_convolution").height > 0


def test_backward_kernels_take_forward_shapes_and_module() -> None:
    t = kinetolens.load(TRACES / "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    bwd = t.kernels.filter((pl.col("direction") == "bprop") & (pl.col("op") == "aten::cudnn_convolution_backward_weight"))
    assert bwd.height > 0
    assert set(bwd["fwd_op"].unique().to_list()) <= {"aten::cudnn_convolution", "aten::_convolution", "aten::convolution"}
    fwd = t.ops.filter(pl.col("op_id").is_in(bwd["fwd_op_id"].to_list()))
    assert fwd["input_dims"].null_count() == 0
    # Each op's kernels are numbered from 0 in launch order.
    subs = t.kernels.filter(pl.col("op_id").is_not_null()).group_by("op_id").agg(pl.col("sub").sort())
    assert all(s == list(range(len(s))) for s in subs["sub"].head(200).to_list())


def test_steps_cover_their_gpu_work() -> None:
    t = kinetolens.load(TRACES / "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    assert t.steps["step"].to_list() == [5, 6, 7, 8, 9, 10]
    for step in t.steps.iter_rows(named=True):
        ks = t.kernels.filter(pl.col("step") == step["step"])
        assert ks.height > 0
        assert (ks["ts"] + ks["dur"]).max() <= step["end"]
        assert step["end"] >= step["cpu_end"]


def test_corrupt_cache_is_rebuilt_not_trusted(tmp_path) -> None:
    src = TRACES / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    path = tmp_path / src.name
    shutil.copy(src, path)
    cache = tmp_path / "cache"
    first = kinetolens.load(path, cache=cache)
    entry = cache / cache_key(path)
    assert (entry / "kernels.parquet").exists()
    (entry / "kernels.parquet").write_bytes(b"not parquet")
    again = kinetolens.load(path, cache=cache)
    assert again.kernels.equals(first.kernels)
    # A changed file gets a new key: the stale entry is never read.
    os.utime(path, ns=(1, 1))
    assert cache_key(path) != entry.name
