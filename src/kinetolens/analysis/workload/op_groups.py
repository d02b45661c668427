"""Op and kernel groups as parts that add up: one table from a whole trace or from its windows.

An op table is a group-by over calls.  Its figures are kept here in a form
that two parts of a trace can be merged in (sums, counts of known values,
minima, maxima, value counts of the labels), so that the table of a trace
read a step window at a time (:mod:`kinetolens.analysis.report_windows`)
is the table of the whole trace, made by the same code: a whole trace is
one part.  :func:`finished` turns merged parts into the table
:func:`kinetolens.analysis.workload.ops.op_stats` returns, under any
aggregate.

Column names in a part: ``FIGURE:sum``, ``FIGURE:n`` (calls that know it),
``FIGURE:min``, ``FIGURE:max``; ``WEIGHTED:wsum`` and ``WEIGHTED:w`` for a
duration-weighted mean; ``_work_ns`` and ``_basis_ns`` (sums); the labels
as lists of ``{value, n}``.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from kinetolens.analysis.workload.group_labels import listed, mixed

_PARTS = ("sum", "n", "min", "max")
#: The labels of an op group and of a kernel group, and how each is shown.
OP_LABELS = {"in_shapes": mixed, "dtypes": mixed, "direction": listed}
KERNEL_LABELS = {"op": listed}


def figure_parts(col: str, out: str) -> list[pl.Expr]:
    """Aggregations keeping ``col`` over a group's calls as the parts of ``out``."""
    value = pl.col(col)
    return [
        value.sum().alias(f"{out}:sum"),
        value.is_not_null().sum().cast(pl.UInt32).alias(f"{out}:n"),
        value.min().alias(f"{out}:min"),
        value.max().alias(f"{out}:max"),
    ]


def _weighted_sums(col: str, weight: str) -> tuple[pl.Expr, pl.Expr]:
    known = pl.col(col).is_not_null()
    return (pl.col(col) * pl.col(weight)).filter(known).sum(), pl.col(weight).filter(known).sum()


def _ratio(weighted_sum: pl.Expr, weights: pl.Expr) -> pl.Expr:
    return pl.when(weights > 0).then(weighted_sum / weights)


def weighted(col: str, weight: str, out: str) -> list[pl.Expr]:
    """Aggregations keeping the mean of ``col`` weighted by ``weight`` (calls
    without ``col`` left out) as the parts of ``out``."""
    weighted_sum, weights = _weighted_sums(col, weight)
    return [weighted_sum.alias(f"{out}:wsum"), weights.alias(f"{out}:w")]


def weighted_mean(col: str, weight: str) -> pl.Expr:
    """Mean of ``col`` over a group's rows weighted by ``weight`` (rows without
    ``col`` left out): a kernel name's occupancy is that of the time it ran,
    as torch-tb-profiler reports it, not that of its average launch."""
    return _ratio(*_weighted_sums(col, weight))


def merged(parts: Sequence[pl.DataFrame], keys: list[str], labels: Sequence[str]) -> pl.DataFrame:
    """The groups of ``parts`` (each with unique ``keys``) merged into one part."""
    if len(parts) == 1:
        return parts[0]
    table = pl.concat(parts, how="vertical_relaxed")
    figures = [c for c in table.columns if c not in keys and c not in labels]
    how = {"min": pl.Expr.min, "max": pl.Expr.max}
    numbers = table.group_by(keys).agg(
        how.get(c.rsplit(":", 1)[-1], pl.Expr.sum)(pl.col(c)).alias(c) for c in figures
    )
    for label in labels:
        value = table.schema[label].inner.fields[0].name  # type: ignore[union-attr]  # value_counts' field: the source column
        entries = table.select(*keys, label).explode(label).drop_nulls(label)
        entries = entries.select(*keys, _value=pl.col(label).struct[0], _n=pl.col(label).struct.field("n"))
        counted = (
            entries.group_by([*keys, "_value"]).agg(pl.col("_n").sum())
            .group_by(keys).agg(pl.struct(pl.col("_value").alias(value), pl.col("_n").alias("n")).alias(label))
        )  # fmt: skip
        numbers = numbers.join(counted, on=keys, how="left", nulls_equal=True)
        numbers = numbers.with_columns(pl.col(label).fill_null(pl.lit([], numbers.schema[label])))
    return numbers.select(table.columns)


def taken(out: str, aggregate: str) -> pl.Expr:
    """``out`` over a group's calls under ``aggregate``: ``count`` keeps the
    sum (the count itself is ``calls``); null where no call has a value (no
    work known is not zero work)."""
    n = pl.col(f"{out}:n")
    value = {
        "mean": pl.col(f"{out}:sum") / n,
        "max": pl.col(f"{out}:max"),
        "min": pl.col(f"{out}:min"),
    }.get(aggregate, pl.col(f"{out}:sum"))
    return pl.when(n > 0).then(value)


def known_sum(out: str) -> pl.Expr:
    """The group's sum of ``out``, null where no call knows it (unknown bytes read "-", not 0 GB/s)."""
    return pl.when(pl.col(f"{out}:n") > 0).then(pl.col(f"{out}:sum"))


def weighted_of(out: str) -> pl.Expr:
    """The weighted mean kept by :func:`weighted` (null where no weight is known)."""
    return _ratio(pl.col(f"{out}:wsum"), pl.col(f"{out}:w")).alias(out)


def achieved(flops: str, moved: str) -> list[pl.Expr]:
    """TFLOP/s and GB/s from the groups' summed work and the time it took (``_work_ns``)."""
    ns = pl.when(pl.col("_work_ns") > 0).then(pl.col("_work_ns"))
    return [(known_sum(flops) / ns / 1e3).alias("tflops_s"), (known_sum(moved) / ns).alias("gbps")]


def step_share(share_whole_ns: int) -> pl.Expr:
    """The group's summed ranking time (``_basis_ns``) as a percentage of ``share_whole_ns``."""
    if not share_whole_ns:
        return pl.lit(None, pl.Float64).alias("step_share_pct")
    return (pl.col("_basis_ns") / share_whole_ns * 100.0).alias("step_share_pct")
