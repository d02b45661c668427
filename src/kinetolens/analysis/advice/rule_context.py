"""What every recommendation rule reads: the trace's base results, from its session.

:class:`RuleContext` holds one trace (the steps that ran whole) and gives
the rules the numbers they share (the step breakdown and windows, or an
inference trace's engine iterations in their place; GPU utilization; the
matrix ops' Tensor Core verdicts).  The base results come from the trace's
analysis session (:mod:`kinetolens.analysis.session`), computed once for
the rules, the summary and the report alike; what only rules need
(:attr:`RuleContext.sync_cost`) is kept on the context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import polars as pl

from kinetolens.analysis.advice.inference import iteration_steps
from kinetolens.model.vocabulary import DEVICE_ALLOCATION_CALLS, SYNCHRONIZING_CALLS
from kinetolens.analysis.gputime.overview import (
    average_breakdown,
    step_breakdown,
    step_windows,
)
from kinetolens.analysis.hardware.gpu_metrics import gpu_metrics
from kinetolens.analysis.hardware.tensor_cores import op_tensor_core_eligibility
from kinetolens.analysis.inference.phases import iterations
from kinetolens.analysis.trace_kind import trace_kind
from kinetolens.analysis.trace_kind_type import TraceKind
from kinetolens.model.graph_replay import GRAPH_LAUNCH
from kinetolens.model.trace import Trace

NS_PER_MS = 1e6

#: Calls that block the host until the GPU (or a stream) has drained.
#: Ops whose only purpose is reading a device value on the host.
#: Share of the kernels in steps run from graph launches above which the step already replays a graph.
GRAPH_REPLAYED_SHARE = 0.5
#: Device malloc/free calls per step, and their share of step time, that say the caching allocator is off.
ALLOCATOR_OFF_PER_STEP = 50
ALLOCATOR_OFF_SHARE = 0.05
SCALAR_READ_OPS = ("aten::item", "aten::_local_scalar_dense")


@dataclass
class RuleContext:
    """The trace plus the shared analyses rules read, each computed once."""

    trace: Trace
    #: What-if changes a rule's advice amounts to, by rule, when they depend on
    #: what the rule found (the kernels of the ops it names).
    changes: dict[str, list[Any]] = field(default_factory=dict)

    @cached_property
    def kind(self) -> TraceKind:
        """GPU or not, PyTorch or not: which rules apply and how advice is worded."""
        return trace_kind(self.trace)

    @cached_property
    def iterations(self) -> pl.DataFrame | None:
        """An inference trace's engine iterations, the unit its figures are per
        instead of steps (:mod:`.inference_advice`); None for other traces."""
        its = iterations(self.trace) if self.kind.inference else None
        return its if its is not None and its.height else None

    @cached_property
    def breakdown(self) -> pl.DataFrame:
        if self.iterations is not None:
            return iteration_steps(self.iterations)[0]
        return step_breakdown(self.trace)

    @cached_property
    def average_ns(self) -> dict[str, float]:
        return average_breakdown(self.breakdown) if self.breakdown.height else {}

    @cached_property
    def steps(self) -> int:
        return max(self.breakdown.height, 1)

    @property
    def step_ms(self) -> float:
        return self.average_ns.get("total", 0.0) / NS_PER_MS

    @cached_property
    def windows(self) -> pl.DataFrame:
        if self.iterations is not None:
            return iteration_steps(self.iterations)[1]
        return step_windows(self.trace)

    @cached_property
    def gpu_metrics(self) -> pl.DataFrame:
        return gpu_metrics(self.trace)

    @cached_property
    def tensor_core_ops(self) -> pl.DataFrame:
        """Matrix op calls with their Tensor Core verdicts (two rules read them)."""
        return op_tensor_core_eligibility(self.trace)

    def in_steps(
        self, frame: pl.DataFrame, ts: str = "ts", keep_end: bool = False
    ) -> pl.DataFrame:
        """Rows of ``frame`` whose ``ts`` falls in a step window, with ``step``
        (and the window's end as ``w_end`` when ``keep_end``)."""
        if frame.height == 0 or self.windows.height == 0:
            empty = frame.head(0).with_columns(step=pl.lit(None, pl.Int64))
            return (
                empty.with_columns(w_end=pl.lit(None, pl.Int64)) if keep_end else empty
            )
        w = self.windows.select("step", w_start="start", w_end="end").sort("w_start")
        joined = (
            frame.drop("step", strict=False)
            .sort(ts)
            .join_asof(w, left_on=ts, right_on="w_start", strategy="backward")
        )
        joined = joined.filter(pl.col(ts) < pl.col("w_end")).drop("w_start")
        return joined if keep_end else joined.drop("w_end")

    @cached_property
    def graph_replayed(self) -> tuple[int, int, str] | None:
        """``(replayed, kernels, launch call)`` when most kernels in steps run from
        graph launches (``cudaGraphLaunch``/``hipGraphLaunch``), else None: advice
        to capture the step in a graph would be advice to do what it already does."""
        k = self.in_steps(self.trace.kernels.select("ts", "launch"))
        if k.height == 0:
            return None
        graphs = k.filter(pl.col("launch").str.contains(GRAPH_LAUNCH).fill_null(False))
        if graphs.height < GRAPH_REPLAYED_SHARE * k.height:
            return None
        return graphs.height, k.height, str(graphs["launch"].mode().sort()[0])

    @cached_property
    def allocator_calls(self) -> pl.DataFrame | None:
        """The device malloc/free calls in steps when there are so many that the
        caching allocator must be off (:data:`ALLOCATOR_OFF_PER_STEP` per step,
        :data:`ALLOCATOR_OFF_SHARE` of step time), else None.  Launch-overhead
        advice (graphs, compile) is moot while every tensor costs a synchronizing free."""
        rt = self.trace.runtime
        calls = self.in_steps(rt.filter(pl.col("name").is_in(DEVICE_ALLOCATION_CALLS)))
        if calls.height / self.steps < ALLOCATOR_OFF_PER_STEP or not self.step_ms:
            return None
        share = float(calls["dur"].sum()) / NS_PER_MS / self.steps / self.step_ms
        return calls if share >= ALLOCATOR_OFF_SHARE else None

    @cached_property
    def sync_cost(self) -> pl.DataFrame:
        """Blocking calls in steps with the GPU idle time each one caused.

        A sync returns when the GPU has drained its queue, so the GPU then
        idles until the host launches again: the gap from the call's end to
        the next GPU activity is the cost (the time spent blocked is not,
        since the GPU was busy then), up to the end of the step.
        """
        calls = self.trace.runtime.filter(pl.col("name").is_in(sorted(SYNCHRONIZING_CALLS)))
        calls = self.in_steps(
            calls.select("name", "ts", "end", "op_id", "module", "source"),
            keep_end=True,
        )
        if calls.height == 0:
            return calls.with_columns(idle_ns=pl.lit(0, pl.Int64))
        starts = self.trace.kernels.select(pl.col("ts").alias("next_ts")).sort(
            "next_ts"
        )
        joined = calls.sort("end").join_asof(
            starts, left_on="end", right_on="next_ts", strategy="forward"
        )
        ops = self.trace.ops.select("op_id", pl.col("name").alias("op"), "parent_id")
        return joined.with_columns(
            # Idle past the step's end is the next step's start-up, not this sync's.
            idle_ns=(pl.min_horizontal("next_ts", "w_end") - pl.col("end"))
            .clip(lower_bound=0)
            .fill_null(0)
        ).join(ops, on="op_id", how="left")


def top(frame: pl.DataFrame, key: str, weight: str) -> Any:
    """The value of ``key`` carrying most ``weight`` (None when all null)."""
    rows = frame.filter(pl.col(key).is_not_null())
    if rows.height == 0:
        return None
    return (
        rows.group_by(key)
        .agg(pl.col(weight).sum())
        .sort(weight, descending=True)[key][0]
    )
