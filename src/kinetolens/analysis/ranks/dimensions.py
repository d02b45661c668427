"""Communication per parallel dimension: what each dimension's groups cost a step.

One row per dimension and process group
(:mod:`kinetolens.analysis.ranks.groups` names the dimension): calls, bytes,
time in flight, the synchronizing / transfer split and bandwidth exactly as
:func:`~kinetolens.analysis.ranks.distributed.collective_stats` computes them
per collective, and the time that actually lengthens the step: ``exposed_ms``,
the part of the dimension's calls that no computation on any stream runs
beside (per rank and whole step, averaged over ranks), and ``step_share``, that
over the mean step time.
"""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.ranks.distributed import NS_PER_MS, RankSummary, comm_stats, step_times

KEYS = ["dimension", "group"]


def _exposure(summaries: list[RankSummary], keys: list[str] = KEYS) -> pl.DataFrame:
    """Per ``keys`` (dimension and group): ms in flight and exposed per step, mean over the ranks with whole steps."""
    with_steps = [s for s in summaries if s.steps.height]
    parts = [
        s.exposure.group_by(keys).agg(
            comm_ns=pl.col("comm_ns").sum() / s.steps.height,
            exposed_ns=pl.col("exposed_ns").sum() / s.steps.height,
        )
        for s in with_steps
        if s.exposure.height
    ]
    if not parts:
        return pl.DataFrame(schema={**{k: pl.String for k in keys},
                                    "comm_ms_per_step": pl.Float64, "exposed_ms": pl.Float64})  # fmt: skip
    n = float(len(with_steps))  # a rank without the dimension's calls exposes none of it
    return (
        pl.concat(parts)
        .group_by(keys)
        .agg(
            comm_ms_per_step=pl.col("comm_ns").sum() / n / NS_PER_MS,
            exposed_ms=pl.col("exposed_ns").sum() / n / NS_PER_MS,
        )
    )


def dimension_stats(summaries: list[RankSummary]) -> pl.DataFrame:
    """One row per parallel dimension and group (see the module docstring)."""
    stats = comm_stats(summaries, KEYS)
    if stats.height == 0:
        return stats
    calls = pl.concat([s.calls.select(*KEYS, "basis", "group_desc", "group_ranks") for s in summaries])
    evidence = calls.group_by(KEYS).agg(
        pl.col("group_desc").drop_nulls().first(),
        pl.col("group_ranks").drop_nulls().first(),
        pl.col("basis").first(),
    )
    st = step_times(summaries)
    mean_step = float(st["step_ms"].mean()) if "step_ms" in st.columns and st.height else None  # type: ignore[arg-type]
    return (
        stats.join(evidence, on=KEYS, how="left", nulls_equal=True)
        .join(_exposure(summaries), on=KEYS, how="left", nulls_equal=True)
        .with_columns(
            step_share=pl.col("exposed_ms") / mean_step if mean_step else pl.lit(None, pl.Float64),
        )
        .select(
            "dimension", "group", "group_desc", "group_ranks", "basis", "calls", "bytes", "time_ms", "sync_ms",
            "transfer_ms", "algbw_gbps", "busbw_gbps", "comm_ms_per_step", "exposed_ms", "step_share",
        )  # fmt: skip
        .sort("exposed_ms", descending=True, nulls_last=True)
    )


def dimension_totals(summaries: list[RankSummary]) -> pl.DataFrame:
    """One row per parallel dimension, its groups together: every rank is in one
    group of each dimension it uses, so the per-rank means read as "what this
    dimension costs a rank".  ``groups`` counts the dimension's process groups;
    the other columns are :func:`dimension_stats`' for the dimension as a whole."""
    stats = comm_stats(summaries, ["dimension"])
    if stats.height == 0:
        return stats
    calls = pl.concat([s.calls.select("dimension", "group") for s in summaries])
    groups = calls.group_by("dimension").agg(groups=pl.col("group").n_unique())
    st = step_times(summaries)
    mean_step = float(st["step_ms"].mean()) if "step_ms" in st.columns and st.height else None  # type: ignore[arg-type]
    return (
        stats.join(groups, on="dimension", how="left")
        .join(_exposure(summaries, ["dimension"]), on="dimension", how="left", nulls_equal=True)
        .with_columns(step_share=pl.col("exposed_ms") / mean_step if mean_step else pl.lit(None, pl.Float64))
        .select(
            "dimension", "groups", "calls", "bytes", "time_ms", "sync_ms", "transfer_ms", "algbw_gbps", "busbw_gbps",
            "comm_ms_per_step", "exposed_ms", "step_share",
        )  # fmt: skip
        .sort("exposed_ms", descending=True, nulls_last=True)
    )
