"""Looking rows up by id in the model tables.

The model numbers its rows: ``op_id``, ``launch_id`` and ``kernel_id`` are
each row's position as built.  A lookup by such an id is then a gather,
several times cheaper than the hash join it replaces on million-row
tables.  A table filtered or reordered since (a step range, a diff side)
keeps its ids but not their positions, and takes the join.
"""

from __future__ import annotations

import polars as pl


def numbers_its_rows(table: pl.DataFrame, id_column: str) -> bool:
    """Whether ``table[id_column]`` is 0, 1, ..., height - 1."""
    ids = table.get_column(id_column)
    n = table.height
    if n == 0 or ids.null_count() or ids[0] != 0 or ids[n - 1] != n - 1:
        return False
    return bool((ids == pl.int_range(0, n, dtype=ids.dtype, eager=True)).all())


def rows_by_id(table: pl.DataFrame, id_column: str, ids: pl.Series, columns: list[str]) -> pl.DataFrame:
    """``columns`` of the row of ``table`` whose ``id_column`` is each of
    ``ids``, in the order of ``ids`` (nulls where no row has the id).

    Same result as a left join of ``ids`` on ``table``, provided the ids
    are unique in ``table`` (as model ids are).
    """
    if numbers_its_rows(table, id_column):
        lo, hi = ids.min(), ids.max()
        if lo is None or (lo >= 0 and hi < table.height):  # type: ignore[operator]
            return table.select(pl.col(columns).gather(ids))
    key = "__id"
    return (
        ids.alias(key)
        .to_frame()
        .join(table.select(pl.col(id_column).alias(key), *columns), on=key, how="left", maintain_order="left")
        .drop(key)
    )
