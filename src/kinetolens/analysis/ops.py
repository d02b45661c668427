"""Op statistics grouped and filtered as MegEngine's ``profile_analyze`` did.

Grouping keys: ``op`` (name), ``op+shape`` (name and input shapes),
``module``, ``source``, and ``kernel`` (GPU kernels by name).  Every number
comes from :func:`op_instances`; this module only groups and orders them.
"""

from __future__ import annotations

import polars as pl

from kinetolens.analysis.op_times import op_instances
from kinetolens.analysis.overview import step_windows
from kinetolens.analysis.work import kernel_work
from kinetolens.model.trace import Trace

GROUPINGS = {
    "op": ["name"],
    "op+shape": ["name", "shapes"],
    "module": ["module"],
    "source": ["source"],
    "kernel": ["name"],
}
AGGREGATES = ("sum", "mean", "max", "min", "count")
TIME_COLUMNS = ("device_self_us", "device_total_us", "host_self_us", "host_total_us")


def step_time_ns(trace: Trace) -> int:
    """Wall time the shares are taken of: the steps' windows as the overview
    cuts them (disjoint, so GPU work that runs past a step is not counted
    twice), or the whole trace's window when it has no steps."""
    windows = step_windows(trace)
    return int((windows["end"] - windows["start"]).sum()) if windows.height else 0


def time_basis(trace: Trace) -> str:
    """The total that ranks ops and makes their step share.

    Device time where the trace has GPU work; host time in a CPU-only
    trace, where device time is zero and the host is what the steps spend.
    """
    return "device_total_us" if trace.kernels.height else "host_total_us"


def _with_step_share(table: pl.DataFrame, trace: Trace, basis: str | None = None) -> pl.DataFrame:
    """Total time (``basis``, else :func:`time_basis`) as a percentage of all steps' wall time."""
    total = step_time_ns(trace)
    basis = basis or time_basis(trace)
    share = pl.col(basis) * 1000.0 / total * 100.0 if total else pl.lit(None, pl.Float64)
    return table.with_columns(step_share_pct=share)


def _with_achieved(table: pl.DataFrame) -> pl.DataFrame:
    """TFLOP/s and GB/s from the groups' summed work and time (``_work_ns``), then drop the helpers."""
    ns = pl.when(pl.col("_work_ns") > 0).then(pl.col("_work_ns"))
    return table.with_columns(
        tflops_s=pl.col("_flops_sum") / ns / 1e3,
        gbps=pl.col("_bytes_sum") / ns,
    ).drop("_flops_sum", "_bytes_sum", "_work_ns")


def _agg(col: str, how: str) -> pl.Expr:
    expr = pl.col(col)
    if how == "sum":
        return expr.sum()
    if how == "mean":
        return expr.mean()
    if how == "max":
        return expr.max()
    if how == "min":
        return expr.min()
    return expr.count()


def op_stats(
    trace: Trace,
    *,
    by: str = "op",
    aggregate: str = "sum",
    include_annotations: bool = False,
    step: int | None = None,
) -> pl.DataFrame:
    """One row per group with calls and the four times in microseconds."""
    if by not in GROUPINGS:
        raise ValueError(f"unknown grouping {by!r}; choose from {', '.join(GROUPINGS)}")
    if aggregate not in AGGREGATES:
        raise ValueError(f"unknown aggregate {aggregate!r}; choose from {', '.join(AGGREGATES)}")
    if by == "kernel":
        return _kernel_stats(trace, aggregate, step)
    inst = op_instances(trace)
    if not include_annotations:
        inst = inst.filter(pl.col("kind") == "op")
    if step is not None:
        inst = inst.filter(pl.col("step") == step)
    keys = GROUPINGS[by]
    if by in ("module", "source"):
        # A module's or line's time is that of its top-level ops, so nested
        # ops are not counted twice.
        inst = inst.filter(pl.col("top_op_id") == pl.col("op_id"))
    times = {
        "device_self_us": "device_self",
        "device_total_us": "device_total",
        "host_self_us": "host_self",
        "host_total_us": "host_total",
    }
    basis = times[time_basis(trace)]
    grouped = inst.group_by(keys).agg(
        calls=pl.len(),
        **{out: _agg(src, aggregate) / 1000.0 for out, src in times.items()},
        flops=_agg("flops_total", aggregate),
        bytes=_agg("bytes_total", aggregate),
        _flops_sum=pl.col("flops_total").sum(),
        _bytes_sum=pl.col("bytes_total").sum(),
        _work_ns=pl.col(basis).filter(pl.col("flops_total").is_not_null() | pl.col("bytes_total").is_not_null()).sum(),
        in_shapes=pl.col("shapes").drop_nulls().first(),
        dtypes=pl.col("dtypes").drop_nulls().first(),
        direction=pl.col("direction").cast(pl.String).mode().first(),
    )
    return _with_step_share(_with_achieved(grouped), trace)


def _kernel_stats(trace: Trace, aggregate: str, step: int | None) -> pl.DataFrame:
    work = kernel_work(trace).select("kernel_id", "flops", work_bytes=pl.col("bytes"))  # not memcpy ``bytes``
    k = trace.kernels.join(work, on="kernel_id", how="left")
    if step is not None:
        k = k.filter(pl.col("step") == step)
    grouped = k.group_by("name").agg(
        calls=pl.len(),
        device_self_us=_agg("dur", aggregate) / 1000.0,
        device_total_us=_agg("dur", aggregate) / 1000.0,
        mean_us=pl.col("dur").mean() / 1000.0,
        max_us=pl.col("dur").max() / 1000.0,
        min_us=pl.col("dur").min() / 1000.0,
        op=pl.col("op").drop_nulls().mode().first(),
        blocks_per_sm=pl.col("blocks_per_sm").mean(),
        occupancy=pl.col("occupancy").mean(),
        flops=_agg("flops", aggregate),
        bytes=_agg("work_bytes", aggregate),
        _flops_sum=pl.col("flops").sum(),
        _bytes_sum=pl.col("work_bytes").sum(),
        _work_ns=pl.col("dur").filter(pl.col("flops").is_not_null() | pl.col("work_bytes").is_not_null()).sum(),
    )
    # Kernels have only device time, even in a CPU-only trace (where the table is empty).
    return _with_step_share(_with_achieved(grouped), trace, basis="device_total_us")


def order_and_filter(
    table: pl.DataFrame,
    *,
    order_by: str = "device_total_us",
    top: int | None = None,
    min_time_us: float | None = None,
    max_time_us: float | None = None,
    name_regex: str | None = None,
    time_column: str | None = None,
) -> pl.DataFrame:
    """Sort (``+COL`` ascending, ``COL`` descending), filter, cut, and add ``cumulative``."""
    ascending = order_by.startswith("+")
    col = order_by.lstrip("+-")
    if col not in table.columns:
        raise ValueError(f"cannot order by {col!r}; columns: {', '.join(table.columns)}")
    time_col = time_column or (col if col in TIME_COLUMNS else "device_total_us")
    if min_time_us is not None:
        table = table.filter(pl.col(time_col) >= min_time_us)
    if max_time_us is not None:
        table = table.filter(pl.col(time_col) <= max_time_us)
    if name_regex:
        key = table.columns[0]
        table = table.filter(pl.col(key).cast(pl.String).str.contains(name_regex))
    table = table.sort(col, descending=not ascending, nulls_last=True, maintain_order=True)
    if table.schema[col].is_numeric():
        table = table.with_columns(cumulative=pl.col(col).cum_sum())
    if top is not None:
        table = table.head(top)
    return table
