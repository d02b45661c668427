"""Ranks' clocks put on one timeline, and what the aligned timeline shows.

Each process stamps its trace with its own host's clock; hosts disagree by
milliseconds to seconds, so a start on rank 3 minus a start on rank 0 means
nothing until the clocks are aligned.  A collective, though, ends at about the
same instant on every rank (no rank leaves before the last one's data has
arrived), so for every call matched across ranks
(:func:`~kinetolens.analysis.ranks.distributed.matched_calls`) the difference
of its ends is the difference of the clocks plus a little jitter.  A rank's
offset is the median of those differences against the reference rank (the
lowest), its uncertainty their spread (1.4826 x the median absolute
deviation: a standard deviation for normal jitter).  A rank that shares no
call with the reference (it is in other groups only) is aligned through the
aligned rank it shares most calls with.

On the aligned timeline (``ts - offset``), per matched call:

* ``transfer_ns``: the shortest duration among its ranks (as TraceLens and
  torch-tb-profiler): the time the collective needs once everyone is there;
* ``arrival_skew_ns``: how much later than the earliest rank this rank
  started it (GPU kernel start for NCCL, the range's start for gloo);
* ``launch_skew_ns``: the same for the host call that launched it.

A call whose largest arrival skew exceeds its transfer is held up by a late
rank; otherwise the collective itself is slow.
"""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.ranks.distributed import NS_PER_MS, RankSummary, matched_calls

_MAD_SCALE = 1.4826
KEY = ["group", "collective", "seq"]

OFFSET_SCHEMA = {
    "rank": pl.Int64,
    "reference": pl.Int64,
    "offset_ms": pl.Float64,
    "spread_us": pl.Float64,
    "calls": pl.UInt32,
}


def _ends(calls: pl.DataFrame) -> pl.DataFrame:
    return calls.select("rank", *KEY, end=pl.col("ts") + pl.col("dur"))


def _offsets_against(ends: pl.DataFrame, known: pl.DataFrame) -> pl.DataFrame:
    """For every rank not in ``known`` (``rank, offset_ns, spread_ns``): the median and spread of
    ``end - end_of_known_rank`` over their common calls, through the known rank it shares most calls with."""
    todo = ends.join(known.select("rank"), on="rank", how="anti")
    ref = ends.join(known, on="rank").rename({"rank": "via", "end": "via_end"})
    pairs = todo.join(ref, on=KEY, nulls_equal=True).with_columns(d=(pl.col("end") - pl.col("via_end")).cast(pl.Float64))
    if pairs.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int64, "offset_ns": pl.Float64, "spread_ns": pl.Float64, "calls": pl.UInt32})
    stats = (
        pairs.group_by("rank", "via")
        .agg(
            median=pl.col("d").median(),
            mad=(pl.col("d") - pl.col("d").median()).abs().median(),
            calls=pl.len(),
            via_offset=pl.col("offset_ns").first(),
            via_spread=pl.col("spread_ns").first(),
        )
        .sort("rank", "calls", "via", descending=[False, True, False])
        .unique("rank", keep="first", maintain_order=True)
    )
    spread = pl.when(pl.col("calls") > 1).then(_MAD_SCALE * pl.col("mad"))
    return stats.select(
        "rank",
        offset_ns=pl.col("via_offset") + pl.col("median"),
        spread_ns=(spread.pow(2) + pl.col("via_spread").pow(2)).sqrt(),
        calls=pl.col("calls").cast(pl.UInt32),
    )


def clock_offsets(summaries: list[RankSummary], calls: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per rank: its clock's offset from the reference rank's (ms: add it to the
    reference's time to get this rank's), the uncertainty (µs) and the number of
    calls it rests on.  The reference has offset 0; a rank sharing no timed
    call with any aligned rank has none (null).  Ranks are aligned in rounds,
    each against the aligned rank it shares most calls with (a few joins a
    round, so a thousand ranks cost no more than a few)."""
    calls = matched_calls(summaries) if calls is None else calls
    ranks = sorted({s.rank for s in summaries})
    if not ranks:
        return pl.DataFrame(schema=OFFSET_SCHEMA)
    ref = ranks[0]
    known = pl.DataFrame(
        {"rank": [ref], "offset_ns": [0.0], "spread_ns": [0.0], "calls": [0]},
        schema={"rank": pl.Int64, "offset_ns": pl.Float64, "spread_ns": pl.Float64, "calls": pl.UInt32},
    )
    ends = _ends(calls).with_columns(pl.col("rank").cast(pl.Int64)) if calls.height else None
    while ends is not None and known.height < len(ranks):
        found = _offsets_against(ends, known)
        if found.height == 0:
            break
        known = pl.concat([known, found])
    got = {r["rank"]: r for r in known.iter_rows(named=True)}
    rows = [
        {"rank": r, "reference": ref,
         "offset_ms": got[r]["offset_ns"] / NS_PER_MS if r in got else None,
         "spread_us": got[r]["spread_ns"] / 1e3 if r in got and got[r]["spread_ns"] is not None else None,
         "calls": got[r]["calls"] if r in got else 0}  # fmt: skip
        for r in ranks
    ]
    return pl.DataFrame(rows, schema=OFFSET_SCHEMA)


def aligned_calls(summaries: list[RankSummary]) -> pl.DataFrame:
    """:func:`matched_calls` with ``aligned_ts`` / ``aligned_host_ts`` (on the
    reference rank's clock), ``arrival_skew_ns`` and ``launch_skew_ns`` (see
    the module docstring).  Ranks whose clock could not be aligned are left out."""
    calls = matched_calls(summaries)
    if calls.height == 0:
        return calls.with_columns(
            aligned_ts=pl.lit(None, pl.Int64), aligned_host_ts=pl.lit(None, pl.Int64),
            arrival_skew_ns=pl.lit(None, pl.Int64), launch_skew_ns=pl.lit(None, pl.Int64),
        )  # fmt: skip
    offsets = clock_offsets(summaries, calls).drop_nulls("offset_ms")
    shift = (pl.col("offset_ms") * NS_PER_MS).round().cast(pl.Int64)
    return (
        calls.join(offsets.select("rank", "offset_ms"), on="rank")
        .with_columns(aligned_ts=pl.col("ts") - shift, aligned_host_ts=pl.col("host_ts") - shift)
        .with_columns(
            arrival_skew_ns=pl.col("aligned_ts") - pl.col("aligned_ts").min().over(KEY),
            launch_skew_ns=pl.col("aligned_host_ts") - pl.col("aligned_host_ts").min().over(KEY),
        )
        .drop("offset_ms")
    )


SKEW_SCHEMA = {
    "dimension": pl.String,
    "group": pl.String,
    "collective": pl.String,
    "calls": pl.UInt32,
    "transfer_us": pl.Float64,
    "arrival_skew_us": pl.Float64,
    "launch_skew_us": pl.Float64,
    "late_rank_calls": pl.UInt32,
    "bound_by": pl.String,
}


def transfer_vs_skew(summaries: list[RankSummary], calls: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per dimension, group and collective: matched calls, mean per call of
    the transfer time and of the largest arrival and launch skew among the
    ranks (µs), how many calls waited longer for a late rank than they took to
    transfer, and what bounds the collective: ``late rank`` where the mean
    arrival skew exceeds the mean transfer, else ``transfer``."""
    calls = aligned_calls(summaries) if calls is None else calls
    if calls.height == 0:
        return pl.DataFrame(schema=SKEW_SCHEMA)
    per_call = calls.group_by(*KEY, "dimension").agg(
        transfer_ns=pl.col("transfer_ns").first(),
        arrival=pl.col("arrival_skew_ns").max(),
        launch=pl.col("launch_skew_ns").max(),
    )
    return (
        per_call.group_by("dimension", "group", "collective")
        .agg(
            calls=pl.len(),
            transfer_us=pl.col("transfer_ns").mean() / 1e3,
            arrival_skew_us=pl.col("arrival").mean() / 1e3,
            launch_skew_us=pl.col("launch").mean() / 1e3,
            late_rank_calls=(pl.col("arrival") > pl.col("transfer_ns")).sum(),
        )
        .with_columns(
            bound_by=pl.when(pl.col("arrival_skew_us") > pl.col("transfer_us"))
            .then(pl.lit("late rank"))
            .otherwise(pl.lit("transfer"))
        )
        .sort("dimension", "group", "collective")
        .cast(SKEW_SCHEMA)  # type: ignore[arg-type]
        .select(list(SKEW_SCHEMA))
    )
