"""The trace model: polars tables with explicit links between them.

``Trace`` is a plain container.  Analyses are pure functions of it (see
``kinetolens.analysis``); nothing here reads files or renders output.

Tables (times in integer nanoseconds, ``end = ts + dur``):

* ``kernels``: one row per GPU activity (kernel, memcpy, memset) with its
  launch (``launch_id``), op (``op_id``), top-level op, module, source line,
  direction, forward op (backward kernels), ``sub`` index and step.
* ``ops``: CPU ops and annotations with ``parent_id``/``top_op_id``/``depth``,
  shapes and dtypes, ``module``, ``source``, ``direction``, ``fwd_op_id`` and
  ``fwd_link`` (how it was found: ``fwdbwd_flow``, ``sequence_number`` or
  ``creation_order``).
* ``runtime``: CUDA runtime/driver calls with the ``op_id`` they ran under
  and ``op_link`` (``external_id``, ``containment`` or
  ``after_backward_node``).
* ``python``: python_function ranges (with_stack / with_modules), with the
  ``module`` path they run in (an ``nn.Module:`` frame's own path).
* ``steps``: ProfilerStep ranges as disjoint windows over their GPU work
  (``start``, ``end``, ``dur``), flagged ``complete`` (see ``model.steps``).
* ``memory``, ``flows``, ``device_events`` (GPU annotations, CUPTI ranges),
  ``threads``, ``processes``.
* ``kernel_counters``: CUPTI range-profiler counter values, one row per
  ``cuda_profiler_range`` event and metric (empty for traces without them;
  see ``kinetolens.ingest.kineto_counters``).
* ``counters``: Chrome counter events (``ph: "C"``), one row per event and
  numeric arg (``event, name, cat, pid, tid, ts, key, value``): memory
  sampled by ``kinetolens.profile(sample_rate=N)``, Kineto's GPU metrics
  (empty for traces without them; see
  ``kinetolens.ingest.kineto_counter_events``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kinetolens.errors import TraceWarning
from kinetolens.ingest.kineto_counter_events import empty_counter_events
from kinetolens.ingest.kineto_counters import empty_counters

TABLES = (
    "ops",
    "runtime",
    "kernels",
    "python",
    "memory",
    "flows",
    "steps",
    "device_events",
    "threads",
    "processes",
    "kernel_counters",
    "counters",
)


@dataclass
class Trace:
    path: str
    format: str
    metadata: dict[str, Any]
    ops: pl.DataFrame
    runtime: pl.DataFrame
    kernels: pl.DataFrame
    python: pl.DataFrame
    memory: pl.DataFrame
    flows: pl.DataFrame
    steps: pl.DataFrame
    device_events: pl.DataFrame
    threads: pl.DataFrame
    processes: pl.DataFrame
    warnings: list[TraceWarning] = field(default_factory=list)
    kernel_counters: pl.DataFrame = field(default_factory=empty_counters)
    counters: pl.DataFrame = field(default_factory=empty_counter_events)

    @property
    def events(self) -> pl.DataFrame:
        """Every duration event in one table (kind, name, pid, tid, ts, dur)."""
        cols = ["kind", "name", "pid", "tid", "ts", "dur"]
        parts = [
            self.ops.select(cols),
            self.runtime.select(cols),
            self.python.select(cols),
            self.kernels.select(cols),
            self.device_events.select(cols),
        ]
        return pl.concat([p.with_columns(pl.col("kind").cast(pl.String)) for p in parts]).sort("ts")

    @property
    def devices(self) -> list[dict[str, Any]]:
        props = self.metadata.get("deviceProperties") or []
        return [p for p in props if isinstance(p, dict)]

    @property
    def rank(self) -> int | None:
        info = self.metadata.get("distributedInfo") or {}
        rank = info.get("rank") if isinstance(info, dict) else None
        return rank if isinstance(rank, int) else None

    @property
    def world_size(self) -> int | None:
        info = self.metadata.get("distributedInfo") or {}
        size = info.get("world_size") if isinstance(info, dict) else None
        return size if isinstance(size, int) else None

    def __repr__(self) -> str:
        return (
            f"Trace({self.path!r}, format={self.format}, ops={self.ops.height}, "
            f"kernels={self.kernels.height}, steps={self.steps.height})"
        )

    def _repr_html_(self) -> str:
        """A small summary table for Jupyter: the file, its devices and each table's rows.

        Analyses render themselves (polars tables, plotly figures from
        ``kinetolens.views.figures``); the whole report is
        ``kinetolens.views.report_data.collect(trace)``.
        """
        from html import escape

        rows = [("path", self.path), ("format", self.format)]
        rows += [("rank / world size", f"{self.rank} / {self.world_size}")] if self.rank is not None else []
        rows += [("device", str(d.get("name"))) for d in self.devices]
        rows += [(name, f"{getattr(self, name).height:,} rows") for name in TABLES]
        rows += [("warning", str(w)) for w in self.warnings]
        body = "".join(f"<tr><th style='text-align:left'>{escape(k)}</th><td style='text-align:left'>{escape(v)}</td></tr>" for k, v in rows)
        return f"<table><caption>kinetolens Trace</caption>{body}</table>"
