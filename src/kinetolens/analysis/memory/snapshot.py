"""Allocated memory over a CUDA allocator snapshot's recorded window, and its peak, per device.

The snapshot (:mod:`kinetolens.ingest.memory_snapshot`) records each
allocation (``alloc``, +size) and each completed free (``free_completed``,
-size) while history was recorded, and the blocks held when it was taken.
What was allocated when recording began is what is held at the end less
what the window added; the peak is that plus the highest running sum,
which is what ``torch.cuda.max_memory_allocated()`` reports for the window
when its peak statistics were reset as recording began.
"""

from __future__ import annotations

import polars as pl

__all__ = ["PEAK_SCHEMA", "snapshot_peaks"]

#: Actions that change the allocated bytes, and the sign of their size.
_SIGN = {"alloc": 1, "free_completed": -1}
#: Block states still allocated (a block awaiting another stream is not freed yet).
_HELD = ["active_allocated", "active_awaiting_free"]
PEAK_SCHEMA = {
    "device": pl.Int64, "at_start_bytes": pl.Int64, "peak_bytes": pl.Int64, "at_end_bytes": pl.Int64,
    "peak_time_us": pl.Int64, "peak_frame": pl.String,
}  # fmt: skip


def snapshot_peaks(actions: pl.DataFrame, blocks: pl.DataFrame) -> pl.DataFrame:
    """Per device: bytes allocated when recording began, at the peak (when, and
    the Python frame of the allocation that reached it; none where the peak
    is the start), and when the snapshot was taken."""
    held = blocks.filter(pl.col("state").is_in(_HELD)).group_by("device").agg(at_end_bytes=pl.col("size").sum())
    moves = (
        actions.filter(pl.col("action").is_in(list(_SIGN)))
        .sort("device", "seq")
        .with_columns(delta=pl.col("size").fill_null(0) * pl.col("action").replace_strict(_SIGN, return_dtype=pl.Int64))
        .with_columns(net=pl.col("delta").cum_sum().over("device"))
    )
    rise = moves.group_by("device").agg(
        total=pl.col("delta").sum(),
        high=pl.col("net").max(),
        peak_time_us=pl.col("time_us").get(pl.col("net").arg_max()),
        peak_frame=pl.col("frame").get(pl.col("net").arg_max()),
    )
    devices = pl.concat([held.select("device"), rise.select("device")]).unique().drop_nulls()
    table = devices.join(held, on="device", how="left").join(rise, on="device", how="left").with_columns(
        pl.col("at_end_bytes").fill_null(0), pl.col("total").fill_null(0), pl.col("high").fill_null(0)
    )
    start = pl.col("at_end_bytes") - pl.col("total")
    above = pl.col("high") > 0
    return table.select(
        "device",
        at_start_bytes=start,
        peak_bytes=start + pl.when(above).then(pl.col("high")).otherwise(0),
        at_end_bytes="at_end_bytes",
        peak_time_us=pl.when(above).then(pl.col("peak_time_us")),
        peak_frame=pl.when(above).then(pl.col("peak_frame")),
    ).cast(PEAK_SCHEMA).sort("device")
