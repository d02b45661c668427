"""Lookups by model id: a gather where ids are row positions, a join elsewhere."""

from __future__ import annotations

import random

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kinetolens.model.ids import numbers_its_rows, rows_by_id


def _left_join(table: pl.DataFrame, ids: pl.Series, columns: list[str]) -> pl.DataFrame:
    probe = ids.alias("id").to_frame()
    return probe.join(table, on="id", how="left", maintain_order="left").select(columns)


@pytest.mark.parametrize("drop", [False, True])
def test_lookup_matches_a_left_join(drop: bool) -> None:
    rng = random.Random(7)
    table = pl.DataFrame({"id": range(1000), "name": [f"op{i % 13}" for i in range(1000)], "ts": range(0, 3000, 3)})
    if drop:  # a step range: ids kept, positions not
        table = table.filter(pl.col("id") % 3 != 0)
    assert numbers_its_rows(table, "id") is not drop
    ids = pl.Series([rng.choice([None, *range(1000)]) for _ in range(5000)], dtype=pl.Int64)
    assert_frame_equal(rows_by_id(table, "id", ids, ["name", "ts"]), _left_join(table, ids, ["name", "ts"]))


def test_ids_outside_the_table_find_nothing() -> None:
    table = pl.DataFrame({"id": [0, 1, 2], "v": ["a", "b", "c"]})
    assert rows_by_id(table, "id", pl.Series([2, 5, -1, None]), ["v"])["v"].to_list() == ["c", None, None, None]


def test_only_ids_equal_to_positions_count_as_row_numbers() -> None:
    assert numbers_its_rows(pl.DataFrame({"id": [0, 1, 2]}), "id")
    assert not numbers_its_rows(pl.DataFrame({"id": [0, 2, 2]}), "id")  # same ends, not the positions
    assert not numbers_its_rows(pl.DataFrame({"id": [0, None, 2]}), "id")
    assert not numbers_its_rows(pl.DataFrame({"id": []}, schema={"id": pl.Int64}), "id")
