"""Diff of two runs: where the experiment spends more or less time per step.

A *side* is one trace or the traces of a run's ranks.  Every figure is taken
per step first (a trace's sum divided by its number of steps) and then
averaged over the side's traces, so runs that profiled different numbers of
steps or ranks compare, and an op that only one rank runs counts as the
fraction of the mean rank it is.  Only work inside the steps counts (ops and
kernels that ``kinetolens.model`` gave a step); a trace without
``ProfilerStep`` ranges is one step.

Levels (one table each, see :data:`LEVELS`):

* ``step``: the step-time breakdown (kernel, memcpy, ..., other, total) of
  :mod:`kinetolens.analysis.gputime.overview`; its ``total`` row is the mean step time.
* ``module``: time of the top-level ops of each ``nn.Module`` path (backward
  ops carry their forward op's module), so modules do not count nested ops
  twice.
* ``op`` / ``op_shape``: ops (every thread, backward included) by name, and by
  name and input shapes.  Their time is *self* time, so the rows add up and
  the op deltas can explain the step delta; inclusive time is beside it.
* ``kernel``: GPU kernels, memcpys and memsets by name.

Time basis: device time when both sides ran GPU work (a GPU step is what its
kernels make it), else host time (a CPU run's steps are its ops' CPU time).

Environment: the summary's ``environment`` compares what each side's traces
say about the machine and software that ran them
(:mod:`kinetolens.analysis.diff_environment`).

Each trace's figures are sums over its steps
(:mod:`kinetolens.analysis.diff_sums`, which also says how names are
matched: instance numbers, addresses and hashes removed unless
``exact_names``); a trace read a step window at a time gives the same sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kinetolens.analysis.diff_environment import compare_environments
from kinetolens.analysis.diff_levels import LEVEL_KEYS, LEVELS
from kinetolens.analysis.diff_sums import NO_KEY, NO_OP, DiffSums, trace_sums
from kinetolens.analysis.gputime.overview import COLUMNS
from kinetolens.model.trace import Trace

#: A row is ``same`` when its calls per step match and its time moved by at
#: most this percentage of the baseline; run-to-run noise is rarely below it.
SAME_PCT = 1.0
#: Ops listed as explaining the step-time change, at most.
EXPLAIN_TOP = 10
#: Ops that moved less than this percentage of the step delta explain nothing
#: worth listing.
EXPLAIN_MIN_PCT = 1.0
#: Row statuses: only in the experiment, only in the baseline, moved, within :data:`SAME_PCT`.
STATUSES: tuple[str, ...] = ("new", "gone", "changed", "same")


# -- one side ---------------------------------------------------------------------


@dataclass
class _Side:
    sums: list[DiffSums]

    @property
    def has_gpu(self) -> bool:
        return all(f.has_gpu for f in self.sums)

    @property
    def mean_step_ns(self) -> float | None:
        means = [m for m in (f.mean_step_ns for f in self.sums) if m is not None]
        return sum(means) / len(means) if means else None


def _as_sums(side: Trace | DiffSums | Sequence[Trace | DiffSums], label: str, exact: bool) -> list[DiffSums]:
    items = [side] if isinstance(side, (Trace, DiffSums)) else list(side)
    if not items:
        raise ValueError(f"the {label} has no traces")
    sums = [trace_sums(t, exact) if isinstance(t, Trace) else t for t in items]
    if any(f.exact != exact for f in sums):
        raise ValueError(f"the {label}'s sums were taken with{'out' if exact else ''} exact names")
    return sums


# -- per-level tables (one trace, sums over its steps) --------------------------


def _level_sums(f: DiffSums, level: str, device: bool) -> pl.DataFrame:
    """Key columns plus ``calls``, ``ns`` (and ``total_ns``/``instances``) summed over the trace's steps."""
    side = "device" if device else "host"
    if level == "step":
        return pl.DataFrame(
            {"category": list(COLUMNS), "calls": [None] * len(COLUMNS), "ns": [f.categories[c] for c in COLUMNS]},
            schema={"category": pl.String, "calls": pl.Float64, "ns": pl.Float64},
        )
    if level == "kernel":
        return f.kernels.select("name", "calls", "ns")
    if level == "module":
        return f.modules.group_by("module", maintain_order=True).agg(
            pl.col("calls").sum(), ns=pl.col(f"{side}_ns").sum(), instances=pl.col("raw").n_unique().cast(pl.Float64)
        )
    keys = list(LEVEL_KEYS[level])
    sums = f.ops.group_by(keys, maintain_order=True).agg(
        pl.col("calls").sum(), ns=pl.col(f"{side}_ns").sum(), total_ns=pl.col(f"{side}_total_ns").sum()
    )
    calls, ns = f.orphans
    if device and calls:
        row = {"name": NO_OP, "shapes": NO_KEY, "calls": float(calls), "ns": ns, "total_ns": ns}
        sums = pl.concat([sums, pl.DataFrame({k: [row[k]] for k in sums.columns}, schema=sums.schema)])
    return sums


def _side_per_step(side: _Side, level: str, device: bool) -> pl.DataFrame:
    """Per-step figures of one side: each trace's sums over its steps, then the mean over traces."""
    keys = list(LEVEL_KEYS[level])
    parts = []
    for f in side.sums:
        sums = _level_sums(f, level, device)
        n = max(f.steps, 1)
        value_cols = [c for c in sums.columns if c not in keys]
        per_trace = [pl.col(c) / n for c in value_cols if c != "instances"]
        parts.append(sums.with_columns(per_trace))
    stacked = pl.concat(parts, how="vertical_relaxed")
    n_traces = len(side.sums)
    aggs = [
        (pl.col(c).max() if c == "instances" else pl.col(c).sum() / n_traces).alias(c)
        for c in stacked.columns
        if c not in keys
    ]
    return stacked.group_by(keys, maintain_order=True).agg(aggs)


def _join_sides(base: pl.DataFrame, exp: pl.DataFrame, level: str) -> pl.DataFrame:
    keys = list(LEVEL_KEYS[level])
    joined = base.join(exp, on=keys, how="full", coalesce=True, suffix="_exp")
    us = 1 / 1000.0
    b_calls, e_calls = pl.col("calls").fill_null(0.0), pl.col("calls_exp").fill_null(0.0)
    b_us, e_us = pl.col("ns").fill_null(0.0) * us, pl.col("ns_exp").fill_null(0.0) * us
    b_present = pl.col("ns").is_not_null() & ((b_calls > 0) | (b_us > 0))
    e_present = pl.col("ns_exp").is_not_null() & ((e_calls > 0) | (e_us > 0))
    delta = e_us - b_us
    same = (b_calls == e_calls) & (delta.abs() <= b_us.abs() * SAME_PCT / 100.0)
    if level == "step":
        b_present, e_present = pl.lit(True), pl.lit(True)
        same = delta.abs() <= b_us.abs() * SAME_PCT / 100.0
    status = (
        pl.when(b_present.not_() & e_present)
        .then(pl.lit("new"))
        .when(b_present & e_present.not_())
        .then(pl.lit("gone"))
        .when(same)
        .then(pl.lit("same"))
        .otherwise(pl.lit("changed"))
    )
    cols: list[pl.Expr] = [
        *(pl.col(k) for k in keys),
        status.alias("status"),
        b_us.alias("baseline_us"),
        e_us.alias("experiment_us"),
        delta.alias("delta_us"),
        pl.when(b_us != 0).then(delta / b_us * 100.0).alias("delta_pct"),
    ]
    if level != "step":
        cols += [b_calls.alias("baseline_calls"), e_calls.alias("experiment_calls"), (e_calls - b_calls).alias("delta_calls")]
    if "total_ns" in base.columns:
        cols += [
            (pl.col("total_ns").fill_null(0.0) * us).alias("baseline_total_us"),
            (pl.col("total_ns_exp").fill_null(0.0) * us).alias("experiment_total_us"),
        ]
    if "instances" in base.columns:
        cols += [
            pl.col("instances").fill_null(0.0).cast(pl.Int64).alias("baseline_instances"),
            pl.col("instances_exp").fill_null(0.0).cast(pl.Int64).alias("experiment_instances"),
        ]
    out = joined.select(cols)
    if level == "step":  # the parts by |delta|, then the total they add up to
        return out.sort(pl.col("category") == "total", pl.col("delta_us").abs(), descending=[False, True])
    return out.sort(pl.col("delta_us").abs(), *keys, descending=[True, *([False] * len(keys))])


# -- public API -------------------------------------------------------------------


@dataclass
class RunDiff:
    """The comparison of a baseline with an experiment: a summary and one table per level.

    Tables (times in microseconds per step, calls per step; see the module
    docstring): key columns, ``status`` (``new``, ``gone``, ``changed``,
    ``same``), ``baseline_us``, ``experiment_us``, ``delta_us``,
    ``delta_pct`` (null where the baseline is 0), ``baseline_calls``,
    ``experiment_calls``, ``delta_calls``; op levels add inclusive
    ``baseline_total_us``/``experiment_total_us``, the module level
    ``baseline_instances``/``experiment_instances`` (distinct module
    instances merged into the row).  Rows are ordered by ``|delta_us|``
    (the step level's ``total`` row last).
    """

    summary: dict[str, Any]
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)


def _side_info(side: _Side) -> dict[str, Any]:
    mean = side.mean_step_ns
    return {
        "traces": [f.path for f in side.sums],
        "ranks": len(side.sums),
        "steps": [f.steps for f in side.sums],
        "has_steps": all(f.has_steps for f in side.sums),
        "mean_step_us": None if mean is None else mean / 1000.0,
    }


def largest_step_change(step_table: pl.DataFrame) -> dict[str, Any] | None:
    """The step-time category that moved most (``data loading -58 ms`` says why
    a step got faster before any op does), or None when none moved beyond
    :data:`SAME_PCT`."""
    moved = step_table.filter((pl.col("category") != "total") & (pl.col("status") != "same"))
    if moved.height == 0:
        return None
    row = moved.sort(pl.col("delta_us").abs(), descending=True).row(0, named=True)
    return {k: row[k] for k in ("category", "baseline_us", "experiment_us", "delta_us", "delta_pct")}


def explain(op_table: pl.DataFrame, step_delta_us: float, top: int = EXPLAIN_TOP) -> dict[str, Any]:
    """The ops whose self-time deltas account for most of ``step_delta_us``.

    Ops that moved in the step's direction, largest first, until their sum
    reaches the step delta, ``top`` ops are listed, or the next op moved less
    than :data:`EXPLAIN_MIN_PCT` of the step delta.  ``unexplained_us`` is
    the rest of the step delta: negative when these ops grew more than the
    step did (their extra time overlapped other work), and large when the
    change is not in op time at all (idle gaps, waiting, another thread).
    ``all_ops_net_us`` is the net change of every op's self time.
    """
    sign = 1.0 if step_delta_us >= 0 else -1.0
    moved = op_table.filter(pl.col("delta_us") * sign > 0).sort(pl.col("delta_us") * sign, descending=True)
    rows: list[dict[str, Any]] = []
    explained = 0.0
    for row in moved.iter_rows(named=True):
        if len(rows) >= top or (rows and explained * sign >= step_delta_us * sign):
            break
        if abs(row["delta_us"]) < abs(step_delta_us) * EXPLAIN_MIN_PCT / 100.0:
            break
        explained += row["delta_us"]
        rows.append(
            {
                "name": row["name"],
                "status": row["status"],
                "delta_us": row["delta_us"],
                "share_pct": row["delta_us"] / step_delta_us * 100.0 if step_delta_us else None,
            }
        )
    net = float(op_table["delta_us"].sum()) if op_table.height else 0.0
    return {
        "ops": rows,
        "explained_us": explained,
        "unexplained_us": step_delta_us - explained,
        "all_ops_net_us": net,
    }


def compare(
    baseline: Trace | DiffSums | Sequence[Trace | DiffSums],
    experiment: Trace | DiffSums | Sequence[Trace | DiffSums],
    *,
    levels: Sequence[str] = LEVELS,
    exact_names: bool = False,
    top: int = EXPLAIN_TOP,
) -> RunDiff:
    """Compare two runs (a trace each, or the rank traces of each run; or
    their :class:`~kinetolens.analysis.diff_sums.DiffSums`, as a trace read a
    step window at a time gives them).

    The summary holds :func:`compare_environments` (``environment``: GPU,
    torch, CUDA, world size of each side, which differ, which are not
    recorded), both sides' mean step time (mean over ranks of each rank's
    mean step), ``step_delta_us``, ``regression_pct`` (positive: the
    experiment is slower), :func:`largest_step_change` and :func:`explain`'s
    ops, computed from the step and op tables whatever ``levels`` asks for.
    """
    unknown = [lv for lv in levels if lv not in LEVELS]
    if unknown:
        raise ValueError(f"unknown level {unknown[0]!r}; choose from {', '.join(LEVELS)}")
    base = _Side(_as_sums(baseline, "baseline", exact_names))
    exp = _Side(_as_sums(experiment, "experiment", exact_names))
    device = base.has_gpu and exp.has_gpu
    tables: dict[str, pl.DataFrame] = {}
    for level in dict.fromkeys([*levels, "op", "step"]):
        tables[level] = _join_sides(
            _side_per_step(base, level, device), _side_per_step(exp, level, device), level
        )
    b_mean, e_mean = base.mean_step_ns, exp.mean_step_ns
    summary: dict[str, Any] = {
        "environment": compare_environments([f.environment for f in base.sums], [f.environment for f in exp.sums]),
        "basis": "device" if device else "host",
        "baseline": _side_info(base),
        "experiment": _side_info(exp),
        "step_delta_us": None,
        "regression_pct": None,
        "explained_by": None,
        "largest_step_change": largest_step_change(tables["step"]),
    }
    if b_mean is not None and e_mean is not None:
        delta_us = (e_mean - b_mean) / 1000.0
        summary["step_delta_us"] = delta_us
        summary["regression_pct"] = (e_mean / b_mean - 1.0) * 100.0 if b_mean else None
        summary["explained_by"] = explain(tables["op"], delta_us, top)
    summary["counts"] = {
        level: {s: int((t["status"] == s).sum()) for s in STATUSES}
        for level, t in tables.items()
    }
    for level in ("op", "step"):
        if level not in levels:
            tables.pop(level)
    return RunDiff(summary=summary, tables=tables)


def diff_level(
    baseline: Trace | Sequence[Trace],
    experiment: Trace | Sequence[Trace],
    level: str,
    *,
    exact_names: bool = False,
) -> pl.DataFrame:
    """One level's table of :func:`compare`."""
    return compare(baseline, experiment, levels=[level], exact_names=exact_names).tables[level]
