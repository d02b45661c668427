"""Which process group a collective call ran on when its trace does not say.

NCCL traces record each call's group (``record_param_comms``: ``Process
Group Name``, ``Description``, ``Ranks``).  Gloo traces do not (torch 2.13 on
the CPU records no ``record_param_comms``); ``distributedInfo`` still lists
the groups the rank belongs to (``pg_config``).  With one group listed, every
call ran on it.  With several (a DeviceMesh: ``default_pg``, ``mesh_dp``,
``mesh_tp``), taking the default group would put tensor-parallel all-reduces
and FSDP's all-gathers together under the world group, a confident wrong
answer; so a call is placed only on evidence:

* FSDP issued it (it was issued inside one of FSDP's ranges,
  :data:`~kinetolens.model.vocabulary.FSDP_PREFIXES`): it is data-parallel
  (shard) traffic, on the one data-parallel group listed where there is one;
* otherwise its group is unknown, and ``dist`` says so.

Gloo runs a call on its group's worker thread, so the range the trace times
(``gloo:all_gather``) has no caller on its own thread: its caller is the last
``c10d::`` op begun before it on another thread (the op that enqueued it).
"""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.gputime.gpu_streams import union_intervals
from kinetolens.model.vocabulary import C10D_PREFIX, FSDP_PREFIXES


def fsdp_issued(ops: pl.DataFrame, calls: pl.DataFrame) -> pl.Series:
    """For each row of ``calls`` (``op_id``, ``tid``, ``ts``): whether FSDP issued it."""
    if calls.height == 0:
        return pl.Series("fsdp", [], dtype=pl.Boolean)
    name = pl.col("name")
    fsdp = ops.filter(pl.any_horizontal(*(name.str.starts_with(p) for p in FSDP_PREFIXES)))
    if fsdp.height == 0:
        return pl.Series("fsdp", [False] * calls.height, dtype=pl.Boolean)
    spans = union_intervals(fsdp.select("tid", "ts", end=pl.col("ts") + pl.col("dur")), by=["tid"]).sort("ts")
    issuers = ops.filter(name.str.starts_with(C10D_PREFIX)).select(i_tid="tid", i_ts="ts").sort("i_ts")
    points = (
        calls.select("tid", "ts").with_row_index("row").sort("ts")
        .join_asof(issuers, left_on="ts", right_on="i_ts", strategy="backward")
    )  # fmt: skip
    # The call's own point (an NCCL range under its c10d op) and its caller's (a gloo worker's range).
    both = pl.concat([
        points.select("row", "tid", "ts"),
        points.filter(pl.col("i_ts").is_not_null()).select("row", tid=pl.col("i_tid"), ts=pl.col("i_ts")),
    ]).sort("ts")  # fmt: skip
    inside = (
        both.join_asof(spans.rename({"ts": "s_ts"}), left_on="ts", right_on="s_ts", by="tid", strategy="backward", check_sortedness=False)
        .with_columns(inside=pl.col("end").is_not_null() & (pl.col("ts") < pl.col("end")))
        .group_by("row").agg(pl.col("inside").any())
    )  # fmt: skip
    flags = dict(zip(inside["row"].to_list(), inside["inside"].to_list(), strict=True))
    return pl.Series("fsdp", [bool(flags.get(i, False)) for i in range(calls.height)], dtype=pl.Boolean)
