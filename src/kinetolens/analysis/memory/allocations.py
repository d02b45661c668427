"""Each allocation paired with its free: size, op, module, lifetime, and leaks.

An allocator hands an address back out only after it was freed, so on one
device the events at one address alternate alloc, free, alloc, free...  in
time order.  Pairing is therefore a shift within each (device, address)
group, no per-event Python:

* an alloc followed by a free is ``freed``;
* an alloc with nothing after it is ``alive_at_end`` (still held when the
  profiler stopped: a leak candidate, or simply a parameter or cache);
* a free with no alloc before it is ``before_window``: the block was
  allocated before profiling began, so its size and free time are known
  but not its birth;
* an alloc followed by another alloc at the same address is
  ``free_missing`` (the trace lost an event; never seen in practice).

Traces from before PyTorch 1.10 carry no addresses; they give no pairs (see
:func:`pairable`).
"""

from __future__ import annotations

import polars as pl

FREED = "freed"
ALIVE_AT_END = "alive_at_end"
BEFORE_WINDOW = "before_window"
FREE_MISSING = "free_missing"

ALLOCATION_COLUMNS = (
    "device",
    "addr",
    "size",
    "status",
    "alloc_ts",
    "free_ts",
    "lifetime_us",
    "op",
    "module",
    "op_id",
    "free_op",
    "free_op_id",
)


def pairable(events: pl.DataFrame) -> bool:
    """Whether allocations can be paired with frees: every event has an address."""
    return events.height > 0 and events["addr"].null_count() == 0


def allocations(events: pl.DataFrame) -> pl.DataFrame:
    """One row per allocation (or per free of a block allocated before the
    window), columns :data:`ALLOCATION_COLUMNS`, in allocation time order.

    ``events`` is :func:`kinetolens.analysis.memory.usage.memory_events`.  Times
    are trace nanoseconds; ``lifetime_us`` is null unless ``freed``.
    """
    if not pairable(events):
        return pl.DataFrame(schema=_SCHEMA)
    key = ["device", "addr"]
    ev = events.filter(pl.col("bytes") != 0).sort("device", "addr", "ts", "seq")
    ev = ev.with_columns(
        next_bytes=pl.col("bytes").shift(-1).over(key),
        next_ts=pl.col("ts").shift(-1).over(key),
        next_op=pl.col("op").shift(-1).over(key),
        next_op_id=pl.col("op_id").shift(-1).over(key),
        prev_bytes=pl.col("bytes").shift(1).over(key),
        # Time order, ties in file order: the file may interleave its devices' events out of time order.
        order=pl.struct("ts", "seq"),
    )
    allocs = ev.filter(pl.col("bytes") > 0).select(
        "device",
        "addr",
        pl.col("bytes").alias("size"),
        pl.when(pl.col("next_bytes").is_null())
        .then(pl.lit(ALIVE_AT_END))
        .when(pl.col("next_bytes") < 0)
        .then(pl.lit(FREED))
        .otherwise(pl.lit(FREE_MISSING))
        .alias("status"),
        pl.col("ts").alias("alloc_ts"),
        pl.when(pl.col("next_bytes") < 0).then(pl.col("next_ts")).alias("free_ts"),
        "op",
        "module",
        "op_id",
        pl.when(pl.col("next_bytes") < 0).then(pl.col("next_op")).alias("free_op"),
        pl.when(pl.col("next_bytes") < 0).then(pl.col("next_op_id")).alias("free_op_id"),
        "order",
    )
    orphans = ev.filter((pl.col("bytes") < 0) & ~(pl.col("prev_bytes") > 0).fill_null(False)).select(
        "device",
        "addr",
        (-pl.col("bytes")).alias("size"),
        pl.lit(BEFORE_WINDOW).alias("status"),
        pl.lit(None, pl.Int64).alias("alloc_ts"),
        pl.col("ts").alias("free_ts"),
        pl.lit(None, pl.String).alias("op"),
        pl.lit(None, pl.String).alias("module"),
        pl.lit(None, pl.Int64).alias("op_id"),
        pl.col("op").alias("free_op"),
        pl.col("op_id").alias("free_op_id"),
        "order",
    )
    table = pl.concat([allocs, orphans], how="vertical_relaxed").sort("order").drop("order")
    return table.with_columns(
        lifetime_us=((pl.col("free_ts") - pl.col("alloc_ts")) / 1000.0),
    ).select(ALLOCATION_COLUMNS).cast(_SCHEMA)


_SCHEMA: dict[str, pl.DataType] = {
    "device": pl.String(),
    "addr": pl.Int64(),
    "size": pl.Int64(),
    "status": pl.String(),
    "alloc_ts": pl.Int64(),
    "free_ts": pl.Int64(),
    "lifetime_us": pl.Float64(),
    "op": pl.String(),
    "module": pl.String(),
    "op_id": pl.Int64(),
    "free_op": pl.String(),
    "free_op_id": pl.Int64(),
}


def leaks(table: pl.DataFrame) -> pl.DataFrame:
    """Blocks not both allocated and freed inside the window, grouped by
    device, status and the op that allocated (``alive_at_end``) or freed
    (``before_window``) them, biggest first."""
    return (
        table.filter(pl.col("status") != FREED)
        .with_columns(
            op=pl.when(pl.col("status") == BEFORE_WINDOW).then(pl.col("free_op")).otherwise(pl.col("op")),
        )
        .group_by("device", "status", "op", "module")
        .agg(count=pl.len(), bytes=pl.col("size").sum(), largest=pl.col("size").max())
        .sort("bytes", "count", descending=True)
    )
