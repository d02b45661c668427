"""The tables the dashboard pages, one function per table, each a call into ``kinetolens.analysis``.

A source takes a :class:`Ctx` (the loaded trace, the step chosen in the
left panel, the page's parameters) and returns a polars frame; the server
memoizes it per (source, step, parameters) and sorts, filters and pages it
per request (:mod:`.tables`).  Nothing here computes a number an analysis
does not: sources select, join and group analysis results for display.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from kinetolens.analysis.hardware.gpu_metrics import gpu_metrics
from kinetolens.analysis.workload.group_labels import counts, listed
from kinetolens.analysis.hardware.kernels import kernel_table
from kinetolens.analysis.memory.usage import memory_events, op_memory_stats
from kinetolens.analysis.memory.allocations import allocations
from kinetolens.analysis.hardware.module_tree import by_depth, by_type, module_tree
from kinetolens.analysis.workload.op_times import op_instances
from kinetolens.analysis.workload.ops import op_stats, rank_basis
from kinetolens.analysis.gputime.overview import COLUMNS, average_breakdown, step_breakdown
from kinetolens.analysis.advice.recommendations import recommendations_frame
from kinetolens.analysis.hardware.roofline import (
    KERNEL_GROUPS,
    kernel_groups,
    kernel_roofline,
    roofline_by,
    with_time_lost,
)
from kinetolens.registry.gpus import GpuSpec
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.views.dashboard.state import Loaded

#: Groupings the pages offer (the analyses accept these names).
OP_GROUPS = ("op", "op+shape", "module", "source")
#: Depths the module tree offers (the first is the default).
MODULE_DEPTHS = ("2", "1", "3", "4", "all")
NO_MODULE = "(no module)"


class BadParameter(ValueError):
    """A request parameter a view cannot use: the request's fault, answered 400.

    Raised only where a parameter is read; any other exception from an
    analysis is the server's fault (500, logged), whatever its type."""


@dataclass
class Ctx:
    """What a source needs: the trace, the step (None = all) and the page's parameters."""

    loaded: Loaded
    step: int | None
    args: Mapping[str, str]
    #: The second trace of a diff.
    other: Loaded | None = None
    #: Every rank's digest for the Distributed view (:class:`.compare.RankDigest`),
    #: and what identifies them: their files (path, size, mtime).
    ranks: list[Any] | None = None
    ranks_key: tuple[Any, ...] = ()

    @property
    def trace(self):  # type: ignore[no-untyped-def]
        return self.loaded.trace

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        return self.loaded.memo(key, compute)

    def choice(self, name: str, allowed: tuple[str, ...]) -> str:
        value = self.args.get(name) or allowed[0]
        if value not in allowed:
            raise BadParameter(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
        return value

    def number(self, name: str) -> float | None:
        raw = self.args.get(name)
        if raw in (None, ""):
            return None
        try:
            value = float(raw)  # type: ignore[arg-type]
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise BadParameter(f"{name} must be a number, not {raw!r}")
        return value

    def whole(self, name: str, default: int) -> int:
        raw = self.args.get(name) or ""
        if raw == "":
            return default
        try:
            return int(raw)
        except ValueError:
            raise BadParameter(f"{name} must be a whole number, not {raw!r}") from None


def spec_of(ctx: Ctx) -> GpuSpec | None:
    """The GPU's roofs when the registry knows it and it has both ceilings."""
    spec = gpu_spec(ctx.trace)
    if spec is None or not spec.dram_gbps or (spec.peak_override_tflops is None and not spec.tflops):
        return None
    return spec


# -- overview ---------------------------------------------------------------

#: Per-GPU shares (0..1 in the analysis) shown as percent.
GPU_PERCENT = {"utilization": "utilization_pct", "sm_efficiency": "sm_efficiency_pct", "occupancy": "occupancy_pct",
               "tensor_core_share": "tensor_core_pct"}  # fmt: skip


def gpus(ctx: Ctx) -> pl.DataFrame:
    """:func:`gpu_metrics` with its shares in percent (55.5, not 0.555)."""
    table = gpu_metrics(ctx.trace)
    return table.with_columns(pl.col(c) * 100.0 for c in GPU_PERCENT).rename(GPU_PERCENT)


def execution_summary(ctx: Ctx) -> pl.DataFrame:
    """The average step's breakdown: category, microseconds, percent of the step."""
    table = step_breakdown(ctx.trace)
    if table.height == 0:
        return pl.DataFrame(schema={"category": pl.String, "time_us": pl.Float64, "pct": pl.Float64})
    avg = average_breakdown(table)
    total = avg.get("total") or 0.0
    rows = [(c, avg[c] / 1000.0, avg[c] / total * 100.0 if total else None) for c in COLUMNS if c != "total"]
    if ctx.trace.kernels.height == 0:  # a CPU-only trace: GPU categories would be rows of zeros
        rows = [r for r in rows if r[1]]
    return pl.DataFrame(rows, schema={"category": pl.String, "time_us": pl.Float64, "pct": pl.Float64}, orient="row")


def recommendations(ctx: Ctx) -> pl.DataFrame:
    return recommendations_frame(ctx.trace).drop("where")


# -- operators --------------------------------------------------------------

def ops(ctx: Ctx) -> pl.DataFrame:
    """op_stats in the chosen grouping, with time lost and % of roofline where the GPU is known."""
    by = ctx.choice("group", OP_GROUPS)
    table = op_stats(ctx.trace, by=by, step=ctx.step)
    spec = spec_of(ctx)
    if spec is not None:
        table = with_time_lost(table, ctx.trace, spec, by, step=ctx.step)
    basis = rank_basis(ctx.trace, by)
    front = [c for c in table.columns if c not in ("in_shapes", "dtypes", "direction")]
    return table.select(front).sort(basis, descending=True)


def op_instances_of(ctx: Ctx) -> pl.DataFrame:
    return op_instances(ctx.trace)


def op_kernels(ctx: Ctx) -> pl.DataFrame:
    """The kernels an op (by name) launched directly, grouped by kernel name."""
    name = ctx.args.get("key", "")
    k = ctx.trace.kernels.filter(pl.col("op") == name)
    if ctx.step is not None:
        k = k.filter(pl.col("step") == ctx.step)
    return k.group_by(pl.col("name").alias("kernel")).agg(
        calls=pl.len(), total_us=pl.col("dur").sum() / 1000.0, mean_us=pl.col("dur").mean() / 1000.0,
        stream=counts("stream"),
    ).with_columns(listed("stream")).sort("total_us", descending=True)  # fmt: skip


def op_stacks(ctx: Ctx) -> pl.DataFrame:
    """Where an op (by name) was called from: module, source line and Python stack, with its times."""
    name = ctx.args.get("key", "")
    inst = op_instances_of(ctx).filter(pl.col("name") == name)
    if ctx.step is not None:
        inst = inst.filter(pl.col("step") == ctx.step)
    return inst.group_by("module", "source", "call_stack").agg(
        calls=pl.len(), device_total_us=pl.col("device_total").sum() / 1000.0,
        host_total_us=pl.col("host_total").sum() / 1000.0,
    ).sort("device_total_us", "calls", descending=True)  # fmt: skip


# -- kernels ----------------------------------------------------------------

def kernel_rows(ctx: Ctx) -> pl.DataFrame:
    return ctx.memo(("kernel_table", ctx.step), lambda: kernel_table(ctx.trace, step=ctx.step))


def kernels(ctx: Ctx) -> pl.DataFrame:
    """Kernels grouped by name (or name and op) with Tensor Cores, occupancy, work and % of roofline."""
    spec = spec_of(ctx)
    roof = ctx.memo("kernel_roofline", lambda: kernel_roofline(ctx.trace, spec)) if spec is not None else None
    table = kernel_groups(kernel_rows(ctx), roof, ctx.choice("group", KERNEL_GROUPS))
    # one name column, the recorded name: the page shows its short form, the full one on hover
    return table.select("kernel", pl.exclude("short_name", "kernel"))


# -- modules ----------------------------------------------------------------

def modules(ctx: Ctx) -> pl.DataFrame:
    """The nn.Module tree (parents first, indented) down to the chosen depth, or its roll-up by module class."""
    tree = ctx.memo(("module_tree", ctx.step), lambda: module_tree(ctx.trace, spec_of(ctx), step=ctx.step))
    depth = ctx.choice("depth", MODULE_DEPTHS)
    if ctx.choice("view", ("tree", "type")) == "type":  # every class, whatever the depth shown
        return by_type(tree).select(
            "type", "count", "total_us", "mean_us", "min_us", "max_us", "step_share_pct", "tflops_s", "pct_of_roof",
            "fwd_total_us", "bwd_total_us", "self_us", "flops",
        )
    tree = by_depth(tree, None if depth == "all" else int(depth))
    indent = pl.lit("\u00a0\u00a0\u00a0").repeat_by(pl.col("depth")).list.join("")
    return tree.select(
        module=pl.concat_str(indent, "name"),
        **{c: c for c in ("fwd_total_us", "bwd_total_us", "fwd_self_us", "bwd_self_us", "self_us", "total_us",
                          "step_share_pct", "tflops_s", "pct_of_roof", "flops")},
    )  # fmt: skip


# -- roofline ---------------------------------------------------------------

def roofline(ctx: Ctx) -> pl.DataFrame:
    by = ctx.choice("group", ("op", "module"))
    spec = spec_of(ctx)
    if spec is None:
        return pl.DataFrame(schema={by: pl.String})
    return roofline_by(ctx.trace, spec, by=by, step=ctx.step)


# -- memory -----------------------------------------------------------------

def memory_window(ctx: Ctx) -> tuple[pl.DataFrame, int]:
    """Memory events of the chosen device inside the chosen range (ms from the first event), and that origin."""
    events = ctx.memo("memory_events", lambda: memory_events(ctx.trace))
    origin = int(events["ts"].min()) if events.height else 0  # type: ignore[arg-type]
    device = ctx.args.get("device")
    if device:
        events = events.filter(pl.col("device") == device)
    lo, hi = ctx.number("start_ms"), ctx.number("end_ms")
    if lo is not None:
        events = events.filter(pl.col("ts") >= origin + int(lo * 1e6))
    if hi is not None:
        events = events.filter(pl.col("ts") <= origin + int(hi * 1e6))
    return events, origin


def memory_ops(ctx: Ctx) -> pl.DataFrame:
    """torch-tb-profiler's memory table for the events in the range."""
    events, _ = memory_window(ctx)
    return op_memory_stats(events, ctx.trace.ops)


def memory_allocations(ctx: Ctx) -> pl.DataFrame:
    """Allocations made in the range, paired with their frees (times in ms from the first event)."""
    events, origin = memory_window(ctx)
    table = allocations(events)
    return table.with_columns(
        ((pl.col("alloc_ts") - origin) / 1e6).alias("alloc_ms"),
        ((pl.col("free_ts") - origin) / 1e6).alias("free_ms"),
    ).select("device", "size", "status", "alloc_ms", "free_ms", "lifetime_us", "op", "module", "free_op")


SOURCES: dict[str, Callable[[Ctx], pl.DataFrame]] = {
    "gpus": gpus,
    "execution_summary": execution_summary,
    "recommendations": recommendations,
    "ops": ops,
    "op_kernels": op_kernels,
    "op_stacks": op_stacks,
    "kernels": kernels,
    "modules": modules,
    "roofline": roofline,
    "memory_ops": memory_ops,
    "memory_allocations": memory_allocations,
}

#: Parameters that change a source's result (the rest only sort, filter and page it).
SOURCE_ARGS = ("group", "key", "device", "start_ms", "end_ms", "depth", "view", "phase")


def without_device_columns(ctx: Ctx, frame: pl.DataFrame) -> pl.DataFrame:
    """A CPU-only trace's tables without their ``device_*`` time columns: zeros in every row say nothing."""
    if ctx.trace.kernels.height or ctx.other is not None or ctx.ranks is not None:
        return frame
    return frame.drop([c for c in frame.columns if c.startswith("device_") and c.endswith("_us")])
