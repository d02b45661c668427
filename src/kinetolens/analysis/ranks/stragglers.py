"""Stragglers: ranks that arrive late at collectives, what that costs the rest, and why.

Per rank, from the calls :func:`~kinetolens.analysis.ranks.distributed.matched_calls`
matched across ranks:

* ``late_ms``: how much later than the earliest rank it reaches a step's
  collectives: per step the largest lateness among the step's calls (a rank
  held up before a step's first collective is late there, and the calls
  after it start together), averaged over steps;
* ``last_share``: the share of calls at which it arrived last;
* ``caused_share``: the share of all the ranks' waiting at collectives that
  was waiting for it (at the calls it arrived last at);
* ``cost_ms_per_step``: the time the other ranks spent waiting for it, per
  step: on each other rank, the union of its waits at the calls this rank
  arrived last at (concurrent calls count once), within its steps; averaged
  over the other ranks and divided by the number of steps, so never more
  than a step;
* ``arrival_ms``: the same lateness from start times on the aligned clocks
  (:mod:`kinetolens.analysis.ranks.clocks`): per step the largest arrival
  skew of this rank, averaged over steps (null where its clock could not be
  aligned);
* ``transfer_us``: the mean transfer time (shortest duration among the
  ranks) of the calls this rank arrived last at: next to ``arrival_ms`` it
  says whether those calls were slow collectives or waited for a late rank;
* ``late_z``: its lateness as a robust z-score among all ranks (distance
  from the median in median absolute deviations; null below three ranks);
* ``differs_most`` / ``excess_ms``: the step-time category (data loading,
  host work, kernels, ...; :mod:`kinetolens.analysis.gputime.overview`) in which
  this rank spends the most time per step beyond the other ranks' median,
  and by how much: what makes it late (null where it exceeds them in none).

A rank is a straggler when the others lose a noticeable share of a step
waiting for it (:data:`COST_SHARE`), most of the run's waiting is for it
(:data:`CAUSED_SHARE_FACTOR` times its fair share ``1/N``, at most
:data:`CAUSED_SHARE_CAP`) and, where there are at least three ranks to
compare with, its lateness is an outlier (:data:`LATE_Z`).  Random jitter
makes every rank cause some waiting; only a consistent latecomer passes all
three.  Waiting counts rather than being last: DDP's first bucket of a step
absorbs a late rank's delay and the buckets after it start together, so a
straggler is last at only some calls but causes nearly all the waiting.
"""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.ranks.clocks import aligned_calls
from kinetolens.analysis.ranks.distributed import (
    NS_PER_MS,
    RankSummary,
    matched_calls,
    step_times,
)
from kinetolens.analysis.gputime.gpu_streams import union_intervals
from kinetolens.analysis.gputime.overview import CATEGORIES, OTHER
from kinetolens.analysis.finding import Finding
from kinetolens.model.vocabulary import CATEGORY_WORDS

#: Waiting caused to the others, as a share of the mean step, to report.
COST_SHARE = 0.05
#: Share of all waiting caused, at least this many times its fair share
#: (1/N), at most :data:`CAUSED_SHARE_CAP` (with two ranks: 75%).
CAUSED_SHARE_FACTOR = 2.0
CAUSED_SHARE_CAP = 0.75
#: Robust z-score of lateness above which a rank is an outlier (N >= 3).
LATE_Z = 3.5
_MAD_SCALE = 1.4826
#: Step-time categories that can explain lateness, as a user names them.
#: Communication is left out: waiting at collectives is the effect.
CAUSES: dict[str, str] = {c: CATEGORY_WORDS[c] for c in (*CATEGORIES, OTHER) if c != "communication"}
#: What to do about each cause; the default: shorten it or balance it.
CHANGES: dict[str, str] = {
    "dataloader": "Load this rank's batches faster (DataLoader workers, prefetching, faster storage) or give "
    "every rank equally costly samples",
    "kernel": "Find why this rank's GPU kernels take longer (a slower or throttled GPU, larger or uneven inputs "
    "or shards) and balance the work or replace the node",
    OTHER: "Find what this rank does outside any profiled op (input I/O, unprofiled Python, a slow device) "
    "and balance or remove it",
}

SCHEMA = {
    "rank": pl.Int64,
    "calls": pl.UInt32,
    "late_ms": pl.Float64,
    "last_share": pl.Float64,
    "caused_share": pl.Float64,
    "cost_ms_per_step": pl.Float64,
    "late_z": pl.Float64,
    "arrival_ms": pl.Float64,
    "transfer_us": pl.Float64,
    "differs_most": pl.String,
    "excess_ms": pl.Float64,
    "straggler": pl.Boolean,
}


def category_excess(summaries: list[RankSummary]) -> pl.DataFrame:
    """Per rank and cause category (:data:`CAUSES`): mean ms per step, the
    median of the other ranks' means, and the excess over it."""
    parts = [
        s.breakdown.select(
            rank=pl.lit(s.rank, pl.Int64),
            **{c: pl.col(c).cast(pl.Float64) for c in CAUSES},
        )
        for s in summaries
        if s.breakdown.height
    ]
    schema = {"rank": pl.Int64, "category": pl.String, "ms": pl.Float64,
              "others_ms": pl.Float64, "excess_ms": pl.Float64}  # fmt: skip
    if len(parts) < 2:
        return pl.DataFrame(schema=schema)
    means = (
        pl.concat(parts)
        .group_by("rank")
        .agg(pl.col(list(CAUSES)).mean() / NS_PER_MS)
        .unpivot(index="rank", variable_name="category", value_name="ms")
    )
    ranks = means["rank"].unique().sort().to_list()
    others = pl.concat(
        [
            means.filter(pl.col("rank") != r)
            .group_by("category")
            .agg(others_ms=pl.col("ms").median())
            .with_columns(rank=pl.lit(r, pl.Int64))
            for r in ranks
        ]
    )
    return (
        means.join(others, on=["rank", "category"])
        .with_columns(excess_ms=pl.col("ms") - pl.col("others_ms"))
        .sort("rank", "category")
        .select(list(schema))
        .cast(schema)  # type: ignore[arg-type]
    )


def _within_steps(waits: pl.DataFrame, summaries: list[RankSummary]) -> pl.DataFrame:
    """``[ts, end)`` waits clipped to their rank's step window (found by start)."""
    windows = pl.concat(
        [
            s.steps.select(
                rank=pl.lit(s.rank, pl.Int64),
                w_start="start",
                w_end=pl.col("start") + pl.col("step_ns"),
            )
            for s in summaries
        ]
    ).sort("w_start")
    return (
        waits.sort("ts")
        .join_asof(
            windows, left_on="ts", right_on="w_start", by="rank", strategy="backward",
            check_sortedness=False,  # both sorted by time above; polars cannot tell per group
        )
        .drop_nulls("w_start")
        .with_columns(end=pl.min_horizontal("end", "w_end"))
        .filter(pl.col("end") > pl.col("ts"))
    )


def _waiting_caused(calls: pl.DataFrame, summaries: list[RankSummary]) -> pl.DataFrame:
    """Per rank: ``caused_ns``, the union of each other rank's waits at the
    calls it arrived last at, within steps, summed over the other ranks."""
    waits = calls.filter((pl.col("sync_ns") > 0) & ~pl.col("last")).select(
        "rank",
        blamed="last_rank",
        ts="ts",
        end=pl.col("ts") + pl.col("sync_ns"),
    )
    schema = {"blamed": pl.Int64, "caused_ns": pl.Int64}
    if waits.height == 0 or not any(s.steps.height for s in summaries):
        return pl.DataFrame(schema=schema)
    inside = _within_steps(waits, summaries).select("blamed", "rank", "ts", "end")
    merged = union_intervals(inside, ["blamed", "rank"])
    return (
        merged.group_by("blamed")
        .agg(caused_ns=(pl.col("end") - pl.col("ts")).sum())
        .cast(schema)  # type: ignore[arg-type]
    )


def stragglers(summaries: list[RankSummary]) -> pl.DataFrame:
    """One row per rank (see the module docstring), stragglers first."""
    calls = matched_calls(summaries)
    if calls.height == 0:
        return pl.DataFrame(schema=SCHEMA)
    n = len({s.rank for s in summaries})
    steps = max((s.steps.height for s in summaries), default=0) or 1
    key = ["group", "collective", "seq"]
    # Waiting at each call by the other ranks, owed to the call's last rank.
    calls = calls.with_columns(
        others_wait_ns=pl.col("sync_ns").sum().over(key) - pl.col("sync_ns")
    )
    total_wait = float(calls["sync_ns"].sum())
    # Lateness per whole step (a step the profiler cut short is left out).
    whole = pl.concat(
        [s.steps.select(rank=pl.lit(s.rank, pl.Int64), step="step") for s in summaries]
    )
    late_per_step = (
        calls.join(whole, on=["rank", "step"], how="semi", nulls_equal=True)
        .group_by("rank", "step")
        .agg(late=pl.col("late_ns").max())
        .group_by("rank")
        .agg(late_ms=pl.col("late").mean() / NS_PER_MS)
    )
    aligned = aligned_calls(summaries).join(whole, on=["rank", "step"], how="semi", nulls_equal=True)
    arrival = (
        aligned.group_by("rank", "step")
        .agg(a=pl.col("arrival_skew_ns").max())
        .group_by("rank")
        .agg(arrival_ms=pl.col("a").mean() / NS_PER_MS)
    )
    per_rank = (
        calls.group_by("rank")
        .agg(
            calls=pl.len(),
            transfer_us=pl.col("transfer_ns").filter(pl.col("last")).mean() / 1e3,
            last_share=pl.col("last").mean(),
            caused_share=pl.col("others_wait_ns").filter(pl.col("last")).sum()
            / total_wait
            if total_wait > 0
            else pl.lit(0.0),
        )
        .join(late_per_step, on="rank", how="left")
        .join(arrival, on="rank", how="left")
        .join(_waiting_caused(calls, summaries), left_on="rank", right_on="blamed", how="left")
        .with_columns(
            cost_ms_per_step=pl.col("caused_ns").fill_null(0)
            / max(n - 1, 1)
            / NS_PER_MS
            / steps
        )
        .sort("rank")
    )
    excess = (
        category_excess(summaries)
        .sort("excess_ms", "category", descending=[True, False])
        .group_by("rank", maintain_order=True)
        .first()
        .filter(pl.col("excess_ms") > 0)
        .select("rank", differs_most="category", excess_ms="excess_ms")
    )
    per_rank = per_rank.join(excess, on="rank", how="left")
    median = per_rank["late_ms"].median() or 0.0
    mad = (per_rank["late_ms"] - median).abs().median() or 0.0
    spread = _MAD_SCALE * mad
    late_z = (
        (pl.col("late_ms") - median) / spread
        if spread > 0 and n >= 3
        else pl.lit(None, pl.Float64)
    )
    step_ms = step_times(summaries)
    mean_step = (
        float(step_ms["step_ms"].mean())  # type: ignore[arg-type]
        if "step_ms" in step_ms.columns and step_ms.height
        else 0.0
    )
    min_caused = min(CAUSED_SHARE_CAP, CAUSED_SHARE_FACTOR / n)
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
                & (pl.col("caused_share") >= min_caused)
                & (pl.col("late_ms") > 0)
                & outlier
            ).fill_null(False)
        )
        .sort(["straggler", "cost_ms_per_step"], descending=[True, True])
        .select(list(SCHEMA))
        .cast(SCHEMA)  # type: ignore[arg-type]
    )


def _why(row: dict) -> str:
    """The cause clause of a finding: the category this rank exceeds the others in most."""
    cat, excess = row.get("differs_most"), row.get("excess_ms")
    if cat is None or excess is None or excess <= 0:
        return "; its step breakdown is no longer than the others' in any category"
    return f"; its {CAUSES[cat]} takes {excess:.2f} ms more per step than the other ranks' (median)"


def _split(row: dict) -> str:
    """Transfer vs arrival at the calls it was last to: a late rank, not a slow collective."""
    transfer, arrival = row.get("transfer_us"), row.get("arrival_ms")
    if transfer is None or arrival is None:
        return ""
    verdict = "a late rank, not a slow collective" if arrival * 1e3 > transfer else "slow collectives as much as a late rank"
    return (
        f"; at the calls it is last to, the data moves in {transfer:.1f} us (transfer) while it arrives "
        f"{arrival:.2f} ms after the earliest rank on the aligned clocks: {verdict}"
    )


def straggler_findings(
    summaries: list[RankSummary], table: pl.DataFrame | None = None
) -> list[Finding]:
    """A recommendation per straggler, its saving the waiting it causes per
    step, naming the step-time category it spends more time in than the others."""
    table = stragglers(summaries) if table is None else table
    out = []
    for row in table.filter(pl.col("straggler")).iter_rows(named=True):
        cat, excess = row["differs_most"], row["excess_ms"]
        because = (
            f": its {CAUSES[cat]} takes {excess:.1f} ms more per step"
            if cat is not None and excess is not None and excess > 0
            else ""
        )
        out.append(
            Finding(
                rule="straggler",
                title=f"Rank {row['rank']} is late{because}",
                evidence=(
                    f"rank {row['rank']} reaches each step's collectives {row['late_ms']:.2f} ms after the "
                    f"earliest rank (mean over steps) and the other ranks wait {row['cost_ms_per_step']:.2f} ms "
                    f"per step for it ({row['caused_share']:.0%} of all waiting at collectives)"
                    + _why(row)
                    + _split(row)
                ),
                change=(
                    CHANGES.get(cat, f"Shorten this rank's {CAUSES[cat]} or balance it across ranks")
                    if because
                    else "Find what delays this rank before its collectives: a slower or throttled GPU, "
                    "uneven input sizes or sharding; balance the work or replace the node"
                ),
                saving_ms=float(row["cost_ms_per_step"]),
                estimate="time the other ranks wait for it per step (the union of their waits at the calls it "
                "was last to)",
                where={"rank": row["rank"]},
            )
        )
    return out
