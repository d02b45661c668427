"""What one trace brings to a diff (:mod:`kinetolens.analysis.diff`): sums over its steps.

Every figure a diff compares is a sum over the trace's whole steps (the
step-time categories, and per op, op and shapes, module and kernel: calls,
self and inclusive time on the host and on the device), so the sums of a
trace read a step window at a time add up to the whole trace's
(:func:`added`): each window sums the ops that start in the part of the
trace it owns and the GPU work launched then
(:mod:`kinetolens.model.ownership`), and a diff of two traces too large to
hold reads each a step at a time (:mod:`kinetolens.runs.windowed_read`).

Names are matched after removing what identifies an instance rather than
what ran (:data:`NAME_RULES`): step numbers, addresses, compiled-graph
hashes, Triton kernel indices, and ``nn.Module`` instance numbers
(``Linear_1`` and ``Linear_2`` are both ``Linear``: torch numbers instances
per class in the order they first run, so one inserted layer renumbers every
later one, and matching raw names would pair different layers); with
``exact`` the raw names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from kinetolens.analysis.diff_environment import environment
from kinetolens.analysis.gputime.overview import COLUMNS, step_breakdown, step_row
from kinetolens.analysis.session import per_trace, whole_steps
from kinetolens.analysis.workload.op_times import op_instances
from kinetolens.analysis.workload.ops import without_step_ranges
from kinetolens.model.ownership import owned_kernels, starts_in
from kinetolens.model.trace import Trace

#: Label of rows whose key is missing (ops outside any module, ops without shapes).
NO_KEY = "-"
#: Op-level row for GPU work no op launched (NCCL kernels of a communication
#: thread, kernels whose launch the profiler missed), so that with device time
#: the op rows add up to all the steps' GPU time.
NO_OP = "(no op)"

#: (pattern, replacement): parts of names that number an instance of
#: something rather than say what ran.  Applied in order to op and kernel names.
NAME_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(ProfilerStep)#\d+$"), r"\1#*"),
    (re.compile(r"0x[0-9a-fA-F]+"), "0x*"),
    # Inductor graph / cache hashes: a standalone lowercase token of 20+
    # letters and digits with at least one digit.
    (re.compile(r"\b(?=[a-z0-9]*\d)[a-z0-9]{20,}\b"), "<hash>"),
    (re.compile(r"^(triton_[a-z0-9_]+?)_\d+$"), r"\1_*"),
    (re.compile(r"^(Torch-Compiled Region: )\d+/\d+"), r"\1*/*"),
)
#: ``nn.Module`` instance number at the end of a module path component.
MODULE_INSTANCE = re.compile(r"_\d+(?=\.|$)")

_GPU_KINDS = ("kernel", "memcpy", "memset")
#: The summed columns of each table of :class:`DiffSums`.
_OP_SUMS = ("calls", "host_ns", "host_total_ns", "device_ns", "device_total_ns")
_MODULE_SUMS = ("calls", "host_ns", "device_ns")
_KERNEL_SUMS = ("calls", "ns")


def normalize_name(name: str) -> str:
    """An op or kernel name without what numbers an instance (see :data:`NAME_RULES`)."""
    for pattern, repl in NAME_RULES:
        name = pattern.sub(repl, name)
    return name


def normalize_module(path: str) -> str:
    """``Sequential_0.Linear_2`` -> ``Sequential.Linear``."""
    return MODULE_INSTANCE.sub("", path)


def _map_names(frame: pl.DataFrame, col: str, fn: Callable[[str], str]) -> pl.DataFrame:
    """Apply ``fn`` once per distinct value (names repeat thousands of times)."""
    values = frame[col].drop_nulls().unique()
    if values.len() == 0:
        return frame
    mapping = pl.DataFrame({col: values, "_mapped": [fn(v) for v in values.to_list()]})
    return frame.join(mapping, on=col, how="left").with_columns(pl.col("_mapped").alias(col)).drop("_mapped")


@dataclass(frozen=True)
class DiffSums:
    """One trace's (or one window's) figures a diff compares, summed over its whole steps."""

    path: str | None
    #: Whether the trace has ``ProfilerStep`` ranges (without, the trace is one step).
    has_steps: bool
    #: Whole steps summed (the rows of the step breakdown).
    steps: int
    #: Step-breakdown category (:data:`~kinetolens.analysis.gputime.overview.COLUMNS`, ``total`` included) -> ns over the steps.
    categories: dict[str, float]
    #: Whether GPU work ran inside the steps.
    has_gpu: bool
    #: :func:`~kinetolens.analysis.diff_environment.environment` of the trace.
    environment: dict[str, Any]
    #: Whether names were matched raw (no :func:`normalize_name`).
    exact: bool
    #: ``name, shapes`` (ops and annotations) and :data:`_OP_SUMS`.
    ops: pl.DataFrame
    #: ``module, raw`` (top-level ops; ``raw``: the path before :func:`normalize_module`) and :data:`_MODULE_SUMS`.
    modules: pl.DataFrame
    #: ``name`` (GPU activities) and :data:`_KERNEL_SUMS`.
    kernels: pl.DataFrame
    #: Calls and ns of the GPU work no op launched.
    orphans: tuple[int, float]

    @property
    def mean_step_ns(self) -> float | None:
        return self.categories["total"] / self.steps if self.steps else None


@per_trace
def trace_sums(trace: Trace, exact: bool = False) -> DiffSums:
    """The sums of ``trace``'s whole steps (once per trace: a dashboard comparing it with several others reuses them)."""
    trace = whole_steps(trace)  # a step the profiler cut short is not a step to compare
    return _sums(trace, step_breakdown(trace), exact)


def window_sums(trace: Trace, step: int, own: tuple[int, int], exact: bool = False) -> DiffSums:
    """The sums of the window of ``step`` (``trace``): the ops starting in
    ``own`` ([lo, hi) ns) and the GPU work launched then; nothing where the
    step was cut short by the profiler."""
    trace = whole_steps(trace)
    return _sums(trace, step_row(trace, step), exact, own)


def _sums(trace: Trace, breakdown: pl.DataFrame, exact: bool, own: tuple[int, int] | None = None) -> DiffSums:
    has_steps = trace.steps.height > 0
    # Annotations (record_function ranges) are rows too: a user range that
    # appears or grows is a finding, and kernels launched directly under one
    # are its self time.  The steps themselves are the baseline, not a row.
    ops = without_step_ranges(op_instances(trace)).filter(pl.col("kind").cast(pl.String).is_in(("op", "annotation")))
    kernels = trace.kernels.filter(pl.col("kind").cast(pl.String).is_in(_GPU_KINDS))
    if has_steps:
        ops = ops.filter(pl.col("step").is_not_null())
        kernels = kernels.filter(pl.col("step").is_not_null())
    if own is not None:
        ops = ops.filter(starts_in(own))
        kernels = kernels.filter(owned_kernels(*own))
    orphans = kernels.filter(pl.col("op_id").is_null())
    return DiffSums(
        path=trace.path,
        has_steps=has_steps,
        steps=breakdown.height,
        categories={c: float(breakdown[c].sum()) for c in COLUMNS},
        has_gpu=kernels.height > 0,
        environment=environment(trace),
        exact=exact,
        ops=_op_sums(ops, exact),
        modules=_module_sums(ops, exact),
        kernels=_kernel_sums(kernels, exact),
        orphans=(orphans.height, float(orphans["dur"].sum())),
    )


def _op_sums(ops: pl.DataFrame, exact: bool) -> pl.DataFrame:
    sel = ops.select("name", "shapes", host_ns="host_self", host_total_ns="host_total", device_ns="device_self", device_total_ns="device_total")
    sel = sel if exact else _map_names(sel, "name", normalize_name)
    return sel.with_columns(pl.col("shapes").fill_null(NO_KEY)).group_by("name", "shapes").agg(
        pl.len().cast(pl.Float64).alias("calls"), *(pl.col(c).sum().cast(pl.Float64) for c in _OP_SUMS if c != "calls")
    )


def _module_sums(ops: pl.DataFrame, exact: bool) -> pl.DataFrame:
    top = ops.filter(pl.col("top_op_id") == pl.col("op_id")).select("module", raw="module", host_ns="host_total", device_ns="device_total")
    top = top if exact else _map_names(top, "module", normalize_module)
    return top.with_columns(pl.col("module").fill_null(NO_KEY)).group_by("module", "raw").agg(
        pl.len().cast(pl.Float64).alias("calls"), pl.col("host_ns").sum().cast(pl.Float64), pl.col("device_ns").sum().cast(pl.Float64)
    )


def _kernel_sums(kernels: pl.DataFrame, exact: bool) -> pl.DataFrame:
    k = kernels.select("name", "dur")
    k = k if exact else _map_names(k, "name", normalize_name)
    return k.group_by("name").agg(calls=pl.len().cast(pl.Float64), ns=pl.col("dur").sum().cast(pl.Float64))


def added(parts: Sequence[DiffSums]) -> DiffSums:
    """The sums of a trace from its windows' (in time order; the first's path and environment)."""
    if not parts:
        raise ValueError("no sums to add")
    first = parts[0]

    def stacked(frames: list[pl.DataFrame], keys: list[str], sums: tuple[str, ...]) -> pl.DataFrame:
        return pl.concat(frames).group_by(keys, maintain_order=True).agg(pl.col(c).sum() for c in sums)

    return DiffSums(
        path=first.path,
        has_steps=any(p.has_steps for p in parts),
        steps=sum(p.steps for p in parts),
        categories={c: sum(p.categories[c] for p in parts) for c in COLUMNS},
        has_gpu=any(p.has_gpu for p in parts),
        environment=first.environment,
        exact=first.exact,
        ops=stacked([p.ops for p in parts], ["name", "shapes"], _OP_SUMS),
        modules=stacked([p.modules for p in parts], ["module", "raw"], _MODULE_SUMS),
        kernels=stacked([p.kernels for p in parts], ["name"], _KERNEL_SUMS),
        orphans=(sum(p.orphans[0] for p in parts), sum(p.orphans[1] for p in parts)),
    )
