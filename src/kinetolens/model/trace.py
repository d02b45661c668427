"""The trace model: polars tables with explicit links between them.

``Trace`` is a plain container.  Analyses are pure functions of it (see
``kinetolens.analysis``); nothing here reads files or renders output.

The tables, their columns and units are documented on :class:`Trace`
(``help(kinetolens.Trace)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kinetolens.errors import TraceWarning
from kinetolens.ingest.kineto_counter_events import empty_counter_events
from kinetolens.ingest.kineto_counters import empty_counters
from kinetolens.model.schema import TABLES, tables_doc

__all__ = ["TABLES", "Trace"]

_DOC = f"""One loaded trace: polars tables with explicit links between them.

    Frozen: a table is never reassigned.  A step that changes the model (the
    loader's graph-capture pairing, torch.compile attribution, ...) returns
    a new Trace (``dataclasses.replace``).

    Units: every time column (``ts``, ``dur``, ``end`` and the other ``*_ts``
    and ``*_end`` columns) is an integer in **nanoseconds** (ns), ``end = ts + dur``,
    on the trace's own clock.  The CLI and the report print microseconds
    (us) and milliseconds (ms): divide by 1e3 or 1e6, e.g.
    ``trace.kernels.select(pl.col("dur") / 1e3)`` for us.  Sizes are bytes.
    ``*_id`` columns are row ids within this trace (``op_id`` of ``ops``,
    ``kernel_id`` of ``kernels``, ``launch_id`` of ``runtime``) and the
    links to them; ``pid``/``tid`` are the process and thread ids of the
    trace.  Every table has every column listed below, with that dtype,
    whatever the source (:mod:`kinetolens.model.schema`, checked when built
    and when read from the cache); columns a trace does not record are null.

    Fields: ``path`` (the file), ``format`` (``kineto-json``,
    ``nsys-sqlite``, ...), ``metadata`` (the file's top-level fields, e.g.
    ``deviceProperties``, ``distributedInfo``, and ``kinetolens_run``: the
    ``*.kinetolens.json`` written beside the trace by ``kinetolens.profile``),
    ``warnings`` (what the reader skipped or repaired), ``window_of_steps``
    (on a step window of a file read in windows: the file's whole steps), and
    the tables, each column as ``name`` (dtype, unit): meaning:

{tables_doc()}

    Properties: ``events`` (every duration event in one table), ``devices``
    (``deviceProperties``), ``rank``, ``world_size`` (``distributedInfo``).
    """


@dataclass(frozen=True, eq=False)
class Trace:
    __doc__ = _DOC  # generated from kinetolens.model.schema

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
    #: Where this trace is a window of a file read a step window at a time
    #: (``kinetolens.windowed``): the whole steps of the file.  None: the trace
    #: is the whole file.  What samples the steps (the what-if behind the
    #: recommendations) takes its share of the file's steps, not the window's.
    window_of_steps: int | None = None

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
