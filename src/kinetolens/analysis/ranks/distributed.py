"""The distributed view: many ranks' traces read together.

Two stages, so that a run of hundreds of ranks never holds more than one
trace in memory per worker:

1. :func:`rank_summary` turns one rank's trace into a :class:`RankSummary`:
   a few small tables (per whole step computation / communication / overlap
   and the step-time breakdown, one row per collective call).  It is
   picklable and a few kilobytes, cheap to send back from a worker process
   or a Dask cluster.
2. Pure functions of a list of summaries: step time per rank and its spread
   (:func:`step_times`), collective calls matched across ranks with their
   synchronizing and data-transfer time (:func:`matched_calls`), collective
   statistics with bus bandwidth (:func:`collective_stats`) and stragglers
   (:mod:`kinetolens.analysis.ranks.stragglers`).

Synchronizing vs data transfer is torch-tb-profiler's rule: a collective
cannot move data before its last rank arrives, and all ranks finish it
together, so the shortest duration of a call among its ranks is the
transfer and whatever a rank spent beyond that is waiting for the others.
It reads durations only, never compares timestamps of different ranks, so
it holds on multi-node runs whose hosts' clocks disagree by milliseconds.

Collectives of one rank can be in flight together (DDP's gradient buckets
run on two gloo threads, or on several NCCL streams), so their times and
waits are never summed: a rank's time in a collective, and its waiting, is
the union of the intervals on its own clock (a call's wait is its first
``sync_ns``), and no more than the wall time they span.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import polars as pl

from kinetolens.analysis.ranks.collectives import (
    CALL_SCHEMA,
    STEP_SCHEMA,
    bus_factor,
    call_rows,
    collective_calls,
    comm_overlap_per_step,
    dimension_exposure,
    numbered_calls,
)
from kinetolens.analysis.gputime.gpu_streams import union_intervals
from kinetolens.analysis.gputime.overview import COLUMNS, step_breakdown
from kinetolens.analysis.ranks.pipeline import STEP_SCHEMA as PIPELINE_SCHEMA
from kinetolens.analysis.ranks.pipeline import pipeline_steps
from kinetolens.model.devices import device_name
from kinetolens.model.ownership import starts_in, unique_in_trace
from kinetolens.model.steps import incomplete_steps
from kinetolens.model.trace import Trace

NS_PER_MS = 1e6


@dataclass
class RankSummary:
    """What the cross-rank analyses need from one rank's trace."""

    rank: int
    world_size: int | None
    path: str
    backend: str | None
    steps: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema=STEP_SCHEMA)
    )
    calls: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema=CALL_SCHEMA)
    )
    uses_data_parallel: bool = False
    #: The step-time breakdown (:func:`kinetolens.analysis.gputime.overview.step_breakdown`):
    #: per step, ns in each category, so that a straggler's cause can be named.
    breakdown: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(
            schema={"step": pl.Int64, **{c: pl.Int64 for c in COLUMNS}}
        )
    )
    #: Steps the profiler cut short (:func:`kinetolens.model.steps.incomplete_steps`):
    #: left out of ``steps`` and ``breakdown``, so that ranks are compared on
    #: whole steps only.
    cut_steps: list[int] = field(default_factory=list)
    #: Per parallel dimension, group and whole step: ns its calls are in flight
    #: and ns of that not hidden behind computation
    #: (:func:`kinetolens.analysis.ranks.collectives.dimension_exposure`).
    #: The GPU the rank ran on (its first device's model), None without one: ranks of one job share it.
    device: str | None = None
    #: A pipeline stage's steps: microbatch pass order, step and compute time
    #: (:func:`kinetolens.analysis.ranks.pipeline.pipeline_steps`); empty for other ranks.
    pipeline: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PIPELINE_SCHEMA))
    exposure: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(
            schema={"dimension": pl.String, "group": pl.String, "step": pl.Int64,
                    "comm_ns": pl.Int64, "exposed_ns": pl.Int64}  # fmt: skip
        )
    )


def rank_summary(trace: Trace, rank: int | None = None) -> RankSummary:
    """Summarize one rank.  ``rank`` is used where the trace does not say
    (``distributedInfo`` is the authority when present)."""
    return _summary(trace, rank, collective_calls(trace))


@dataclass(frozen=True)
class RankPart:
    """One step window's part of its rank's summary, where the trace is read
    a step window at a time: the summary of the window (the rows of its own
    steps) and the collective calls it owns (:func:`call_rows`, starting in it)."""

    summary: RankSummary
    calls: pl.DataFrame


def rank_part(trace: Trace, own: tuple[int, int], rank: int | None = None) -> RankPart:
    """``trace`` (a window owning ``own``, [lo, hi) ns, of its file) reduced
    to its part of :func:`rank_summary`.  A step's exposed communication
    counts every call in flight during it, its own and the previous step's."""
    rows = call_rows(trace)
    mine = rows.filter(starts_in(own, "host_ts"))
    return RankPart(_summary(trace, rank, numbered_calls(rows)), mine)


def merged_rank_summary(parts: list[RankPart], cut_steps: list[int]) -> RankSummary:
    """:func:`rank_summary` of a trace read a step window at a time, from its
    windows' :func:`rank_part` in time order; ``cut_steps``: the file's steps
    the profiler cut short."""
    if not parts:
        raise ValueError("no windows")
    first = parts[0].summary

    def joined(attr: str) -> pl.DataFrame:
        return pl.concat([getattr(p.summary, attr) for p in parts])

    # A window numbers its own ops: a call's op id is made unique in the rank
    # (what matches it to its other ranks' calls) by its window's number.
    calls = pl.concat([p.calls.with_columns(unique_in_trace("op_id", i)) for i, p in enumerate(parts)])
    return replace(
        first, steps=joined("steps"), breakdown=joined("breakdown"), exposure=joined("exposure"), pipeline=joined("pipeline"),
        calls=numbered_calls(calls), cut_steps=cut_steps,
        uses_data_parallel=any(p.summary.uses_data_parallel for p in parts),
    )  # fmt: skip


def _summary(trace: Trace, rank: int | None, calls: pl.DataFrame) -> RankSummary:
    info = trace.metadata.get("distributedInfo") or {}
    backend = info.get("backend") if isinstance(info, dict) else None
    the_rank = trace.rank if trace.rank is not None else rank
    if the_rank is None:
        the_rank = 0
    modules = trace.ops["module"].drop_nulls()
    cut = incomplete_steps(trace.steps)
    whole = ~pl.col("step").is_in(cut).fill_null(False)
    return RankSummary(
        rank=int(the_rank),
        world_size=trace.world_size,
        path=trace.path,
        backend=backend if isinstance(backend, str) else None,
        steps=comm_overlap_per_step(trace).filter(whole),
        calls=calls,
        uses_data_parallel=bool(modules.str.contains(r"(^|\.)DataParallel_\d+").any()),
        breakdown=step_breakdown(trace).filter(whole),
        cut_steps=cut,
        exposure=dimension_exposure(trace, calls).filter(whole),
        device=device_name(trace.devices[0]) if trace.devices else None,
        pipeline=pipeline_steps(trace),
    )


def _tagged(summaries: list[RankSummary], attr: str) -> pl.DataFrame:
    parts = [
        getattr(s, attr).with_columns(rank=pl.lit(s.rank, pl.Int64)) for s in summaries
    ]
    return pl.concat(parts) if parts else pl.DataFrame()


def step_times(summaries: list[RankSummary]) -> pl.DataFrame:
    """Per rank: steps, mean and max step time, and per-step means of
    computation, communication, overlap and other (ms)."""
    steps = _tagged(summaries, "steps")
    if steps.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int64, "steps": pl.UInt32})
    ms = {
        c: (pl.col(f"{c}_ns").mean() / NS_PER_MS)
        for c in ("compute", "comm", "overlap", "other")
    }
    return (
        steps.group_by("rank")
        .agg(
            steps=pl.len(),
            step_ms=pl.col("step_ns").mean() / NS_PER_MS,
            max_step_ms=pl.col("step_ns").max() / NS_PER_MS,
            compute_ms=ms["compute"],
            comm_ms=ms["comm"],
            overlap_ms=ms["overlap"],
            other_ms=ms["other"],
        )
        .with_columns(exposed_comm_ms=pl.col("comm_ms") - pl.col("overlap_ms"))
        .sort("rank")
    )


def step_spread(summaries: list[RankSummary]) -> pl.DataFrame:
    """Per step: fastest and slowest rank's step time and the spread (ms)."""
    steps = _tagged(summaries, "steps")
    if steps.height == 0:
        return pl.DataFrame(schema={"step": pl.Int64})
    slowest = pl.col("rank").sort_by("step_ns").last()
    return (
        steps.group_by("step")
        .agg(
            ranks=pl.len(),
            min_ms=pl.col("step_ns").min() / NS_PER_MS,
            mean_ms=pl.col("step_ns").mean() / NS_PER_MS,
            max_ms=pl.col("step_ns").max() / NS_PER_MS,
            slowest_rank=slowest,
        )
        .with_columns(spread_ms=pl.col("max_ms") - pl.col("min_ms"))
        .sort("step", nulls_last=True)
    )


def matched_calls(summaries: list[RankSummary]) -> pl.DataFrame:
    """Every rank's timed collective calls matched by ``(group, collective, seq)``.

    One row per rank and call, with ``transfer_ns`` (the call's shortest
    duration among its ranks), ``sync_ns`` (this rank's duration beyond
    that: waiting for the others), ``late_ns`` (how much later than the
    call's earliest rank this rank arrived, from durations: all ranks end a
    collective together, so a shorter duration is a later arrival; the last
    rank's ``late_ns`` is the whole gap), ``last`` (this rank arrived last)
    and ``last_rank``.  Calls seen on one rank only are left out: there is
    nothing to compare them with; so are calls without a measured time
    (NCCL calls whose kernels were not captured: ``timed`` is False).
    """
    calls = _tagged(summaries, "calls")
    if "timed" not in calls.columns:  # no rank has a calls table at all
        return calls
    key = ["group", "collective", "seq"]
    return (  # an empty frame still gets every column: callers select them
        calls.filter(pl.col("timed"))
        .with_columns(n_ranks=pl.len().over(key))
        .filter(pl.col("n_ranks") > 1)
        .with_columns(
            transfer_ns=pl.col("dur").min().over(key),
            late_ns=pl.col("dur").max().over(key) - pl.col("dur"),
            last_rank=pl.col("rank").sort_by("dur", "rank").first().over(key),
        )
        .with_columns(
            sync_ns=pl.col("dur") - pl.col("transfer_ns"),
            last=pl.col("rank") == pl.col("last_rank"),
        )
        .sort("host_ts", "rank")
    )


def _ranks_in_group(summaries: list[RankSummary]) -> int:
    sizes = [s.world_size for s in summaries if s.world_size]
    return max(sizes) if sizes else len(summaries)


def _covered(intervals: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Per ``by`` group: ns covered by the union of ``[ts, end)`` intervals."""
    merged = union_intervals(intervals.filter(pl.col("end") > pl.col("ts")), by)
    return merged.group_by(by).agg(ns=(pl.col("end") - pl.col("ts")).sum())


def _in_flight(calls: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Per ``by`` group: ``time_ns`` (union of the calls) and ``sync_ns``
    (union of their waits, each call's first ``sync_ns``)."""
    busy = _covered(calls.select(*by, "ts", end=pl.col("ts") + pl.col("dur")), by)
    waits = _covered(calls.select(*by, "ts", end=pl.col("ts") + pl.col("sync_ns")), by)
    return (
        busy.rename({"ns": "time_ns"})
        .join(waits.rename({"ns": "sync_ns"}), on=by, how="left")
        .with_columns(pl.col("sync_ns").fill_null(0))
    )


def call_times(summaries: list[RankSummary]) -> pl.DataFrame:
    """Every rank's calls with their ``transfer_ns`` and ``sync_ns``: matched
    calls as :func:`matched_calls` splits them, calls seen on one rank with
    all of their duration as transfer.  Untimed calls keep nulls."""
    calls = _tagged(summaries, "calls")
    if calls.height == 0:
        return calls
    matched = matched_calls(summaries).select("rank", "op_id", "transfer_ns", "sync_ns")
    timed = pl.col("timed")
    return calls.join(matched, on=["rank", "op_id"], how="left").with_columns(
        transfer_ns=pl.when(timed).then(pl.col("transfer_ns").fill_null(pl.col("dur"))),
        sync_ns=pl.when(timed).then(pl.col("sync_ns").fill_null(0)),
    )


def collective_stats(summaries: list[RankSummary]) -> pl.DataFrame:
    """Per collective: calls and bytes per rank, time split into synchronizing
    and data transfer (ms per rank), and bus bandwidth.

    ``time_ms`` is the wall time the collective's calls were in flight on a
    rank (the union of their intervals: concurrent calls count once), mean
    over ranks; ``sync_ms`` the union of their waits, and ``transfer_ms`` the
    rest.  Only timed calls count (see :func:`matched_calls`);
    ``untimed_calls`` says how many per rank had no measured time (where
    none had, the times and bandwidths are null).

    ``algbw_gbps`` is the message bytes of the timed calls over their
    transfer time, ``busbw_gbps`` nccl-tests' bus bandwidth: algbw times
    :func:`bus_factor` for the group size (``Group size`` of the call, else
    the world size).
    """
    return comm_stats(summaries, ["collective", "kind"])


def comm_stats(summaries: list[RankSummary], keys: list[str]) -> pl.DataFrame:
    """:func:`collective_stats`' figures per ``keys`` (columns of the calls:
    ``collective, kind``; ``dimension, group``)."""
    calls = call_times(summaries)
    if calls.height == 0:
        return pl.DataFrame(schema={**{k: pl.String for k in keys}, "calls": pl.Float64})
    # Keys under names of their own: the interval union uses a ``group`` column.
    names = {k: f"key_{i}" for i, k in enumerate(keys)}
    copies = calls.with_columns(**{v: pl.col(k) for k, v in names.items()})
    out = _comm_stats(copies, list(names.values()), summaries)
    return out.rename({v: k for k, v in names.items()})


def _comm_stats(calls: pl.DataFrame, keys: list[str], summaries: list[RankSummary]) -> pl.DataFrame:
    n = _ranks_in_group(summaries)
    ranks = pl.lit(float(calls["rank"].n_unique()))
    rows = calls.with_columns(
        factor=pl.struct("kind", "group_size").map_elements(
            lambda r: bus_factor(r["kind"], r["group_size"] or n),
            return_dtype=pl.Float64,
        ),
    ).with_columns(bus_bytes=pl.col("bytes") * pl.col("factor"))
    timed = rows.filter(pl.col("timed"))
    by = [*keys, "rank"]
    # Bandwidth from the timed calls with a message size: their bytes over
    # their own transfer time.
    sized = timed.filter(pl.col("bytes").is_not_null())
    bw = _in_flight(sized, by).join(
        sized.group_by(by).agg(pl.col("bytes").sum(), pl.col("bus_bytes").sum()), on=by
    )
    per_key = (
        _in_flight(timed, by)
        .join(bw.rename({"time_ns": "bw_time_ns", "sync_ns": "bw_sync_ns"}), on=by, how="left")
        .group_by(keys)
        .agg(
            time_ms=pl.col("time_ns").sum() / NS_PER_MS,
            sync_ms=pl.col("sync_ns").sum() / NS_PER_MS,
            bw_bytes=pl.col("bytes").sum(),
            bw_bus=pl.col("bus_bytes").sum(),
            bw_ns=(pl.col("bw_time_ns") - pl.col("bw_sync_ns")).sum(),
        )
    )
    with_bw = pl.col("bw_ns") > 0
    return (
        rows.group_by(keys)
        .agg(
            calls=pl.len() / ranks,
            bytes=pl.col("bytes").sum() / ranks,
            untimed_calls=(~pl.col("timed")).sum() / ranks,
        )
        .join(per_key, on=keys, how="left", nulls_equal=True)
        .with_columns(
            pl.col("time_ms", "sync_ms") / ranks,  # null: no call was timed
            algbw_gbps=pl.when(with_bw).then(pl.col("bw_bytes") / pl.col("bw_ns")),
            busbw_gbps=pl.when(with_bw).then(pl.col("bw_bus") / pl.col("bw_ns")),
        )
        .with_columns(transfer_ms=pl.col("time_ms") - pl.col("sync_ms"))
        .select(
            *keys, "calls", "bytes", "time_ms", "sync_ms",
            "transfer_ms", "algbw_gbps", "busbw_gbps", "untimed_calls",
        )  # fmt: skip
        .sort("time_ms", descending=True)
    )


def rank_collective_stats(summary: RankSummary) -> pl.DataFrame:
    """One rank's calls, bytes, host time and device time per collective (µs):
    the per-worker table torch-tb-profiler shows, before ranks are matched.
    ``device_us`` sums the timed calls only (an NCCL call without its
    kernels has no device time; its host enqueue is in ``host_us``)."""
    c = summary.calls
    return (
        c.group_by("collective")
        .agg(
            calls=pl.len(),
            bytes=pl.col("bytes").sum(),
            host_us=pl.col("host_dur").sum() / 1e3,
            device_us=pl.col("dur").filter(pl.col("timed")).sum() / 1e3,
        )
        .sort("collective")
    )


def run_overview(summaries: list[RankSummary]) -> dict[str, object]:
    """Ranks present, world size, backend and step-time spread of a run."""
    st = step_times(summaries)
    worlds = sorted({s.world_size for s in summaries if s.world_size})
    mean = st["step_ms"] if "step_ms" in st.columns else pl.Series([], dtype=pl.Float64)
    return {
        "ranks": len(summaries),
        "world_size": worlds[-1] if worlds else None,
        "backend": next((s.backend for s in summaries if s.backend), None),
        "step_ms_mean": float(mean.mean()) if mean.len() else None,  # type: ignore[arg-type]
        "step_ms_min_rank": float(mean.min()) if mean.len() else None,  # type: ignore[arg-type]
        "step_ms_max_rank": float(mean.max()) if mean.len() else None,  # type: ignore[arg-type]
        "step_ms_spread": float(mean.max() - mean.min()) if mean.len() else None,  # type: ignore[operator]
    }
