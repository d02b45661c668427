"""NCCL's own NVTX ranges are launch wrappers: they give their kernels no forward direction."""

from __future__ import annotations

import polars as pl

from kinetolens.model.direction import own_direction


def test_nccl_api_ranges_are_not_forward_ops() -> None:
    ops = pl.DataFrame({"name": ["ncclGroupEnd", "ncclAllReduce", "aten::mm", "nccl:all_reduce"], "kind": "op"})
    got = ops.select(own_direction(pl.col("name"), pl.col("kind"))).to_series().to_list()
    assert got == ["other", "other", "fprop", "fprop"]
