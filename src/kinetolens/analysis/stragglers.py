"""Stragglers: ranks that arrive late at collectives, and what that costs the rest.

Per rank, from the calls :func:`~kinetolens.analysis.distributed.matched_calls`
matched across ranks:

* ``late_ms``: how much later than the median rank it arrives, averaged over
  its calls;
* ``last_share``: the share of calls at which it arrived last;
* ``cost_ms_per_step``: the time the other ranks spent waiting for it, per
  step: for each call it arrived last at, the mean synchronizing time of the
  others, summed and divided by the number of steps;
* ``late_z``: its lateness as a robust z-score among all ranks (distance
  from the median in median absolute deviations).

A rank is a straggler when the others lose a noticeable share of a step
waiting for it (:data:`COST_SHARE`), it is last far more often than its fair
share of ``1/N`` (:data:`LAST_SHARE_FACTOR`; with two ranks, at every
call) and, where there are at least
three ranks to compare with, its lateness is an outlier (:data:`LATE_Z`).
Random jitter makes every rank last now and then; only a consistent
latecomer passes all three.
"""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.distributed import (
    NS_PER_MS,
    RankSummary,
    matched_calls,
    step_times,
)
from kinetolens.analysis.recommendations import Finding

#: Waiting caused to the others, as a share of the mean step, to report.
COST_SHARE = 0.05
#: Last at least this many times its fair share (1/N) of calls, at most 75%;
#: with two ranks (one of them is always last) at every call.
LAST_SHARE_FACTOR = 2.0
LAST_SHARE_CAP = 0.75
#: Robust z-score of lateness above which a rank is an outlier (N >= 3).
LATE_Z = 3.5
_MAD_SCALE = 1.4826

SCHEMA = {
    "rank": pl.Int64,
    "calls": pl.UInt32,
    "late_ms": pl.Float64,
    "last_share": pl.Float64,
    "cost_ms_per_step": pl.Float64,
    "late_z": pl.Float64,
    "straggler": pl.Boolean,
}


def stragglers(summaries: list[RankSummary]) -> pl.DataFrame:
    """One row per rank (see the module docstring), stragglers first."""
    calls = matched_calls(summaries)
    if calls.height == 0:
        return pl.DataFrame(schema=SCHEMA)
    n = len({s.rank for s in summaries})
    steps = max((s.steps.height for s in summaries), default=0) or 1
    key = ["group", "collective", "seq"]
    # Mean waiting of the other ranks of a call: (sum of sync - own sync) / (n - 1).
    calls = calls.with_columns(
        others_wait_ns=(pl.col("sync_ns").sum().over(key) - pl.col("sync_ns"))
        / (pl.col("n_ranks") - 1)
    )
    per_rank = (
        calls.group_by("rank")
        .agg(
            calls=pl.len(),
            late_ms=pl.col("late_ns").mean() / NS_PER_MS,
            last_share=pl.col("last").mean(),
            cost_ms_per_step=pl.col("others_wait_ns").filter(pl.col("last")).sum()
            / NS_PER_MS
            / steps,
        )
        .sort("rank")
    )
    median = per_rank["late_ms"].median() or 0.0
    mad = (per_rank["late_ms"] - median).abs().median() or 0.0
    spread = _MAD_SCALE * mad
    late_z = (
        (pl.col("late_ms") - median) / spread
        if spread > 0
        else pl.lit(None, pl.Float64)
    )
    step_ms = step_times(summaries)
    mean_step = (
        float(step_ms["step_ms"].mean())
        if "step_ms" in step_ms.columns and step_ms.height
        else 0.0
    )  # type: ignore[arg-type]
    min_last = min(LAST_SHARE_CAP, LAST_SHARE_FACTOR / n) if n >= 3 else 1.0
    outlier = (
        (pl.col("late_z") >= LATE_Z) | pl.col("late_z").is_null()
        if n >= 3
        else pl.lit(True)
    )
    cost_ok = (
        pl.col("cost_ms_per_step") >= COST_SHARE * mean_step
        if mean_step > 0
        else pl.col("cost_ms_per_step") > 0
    )
    return (
        per_rank.with_columns(late_z=late_z)
        .with_columns(
            straggler=(
                cost_ok
                & (pl.col("last_share") >= min_last)
                & (pl.col("late_ms") > 0)
                & outlier
            ).fill_null(False)
        )
        .sort(["straggler", "cost_ms_per_step"], descending=[True, True])
        .cast(SCHEMA)  # type: ignore[arg-type]
    )


def straggler_findings(
    summaries: list[RankSummary], table: pl.DataFrame | None = None
) -> list[Finding]:
    """A recommendation per straggler, its saving the waiting it causes per step."""
    table = stragglers(summaries) if table is None else table
    out = []
    for row in table.filter(pl.col("straggler")).iter_rows(named=True):
        out.append(
            Finding(
                rule="straggler",
                title=f"Rank {row['rank']} is a straggler",
                evidence=(
                    f"rank {row['rank']} arrives {row['late_ms']:.2f} ms after the median rank on average and last "
                    f"at {row['last_share']:.0%} of {row['calls']} collective calls; the other ranks wait "
                    f"{row['cost_ms_per_step']:.2f} ms per step for it"
                ),
                change=(
                    "Find what delays this rank before its collectives: its step breakdown against the others' "
                    "(data loading, host work, a slower or throttled GPU, uneven input sizes or sharding); "
                    "balance the work or replace the node"
                ),
                saving_ms=float(row["cost_ms_per_step"]),
                estimate="time the other ranks wait for it per step (their synchronizing time at calls it was last to)",
                where={"rank": row["rank"]},
            )
        )
    return out
