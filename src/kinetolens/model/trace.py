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
    """One loaded trace: polars tables with explicit links between them.

    Units: every time column (``ts``, ``dur``, ``end`` and the other ``*_ts``
    and ``*_end`` columns) is an integer in **nanoseconds**, ``end = ts + dur``,
    on the trace's own clock.  The CLI and the report print microseconds
    (us) and milliseconds (ms): divide by 1e3 or 1e6, e.g.
    ``trace.kernels.select(pl.col("dur") / 1e3)`` for us.  Sizes are bytes.
    ``*_id`` columns are row ids within this trace (``op_id`` of ``ops``,
    ``kernel_id`` of ``kernels``, ``launch_id`` of ``runtime``) and the
    links to them; ``pid``/``tid`` are the process and thread ids of the
    trace.  Columns a trace does not record are null.

    Fields: ``path`` (the file), ``format`` (``kineto-json``,
    ``nsys-sqlite``, ...), ``metadata`` (the file's top-level fields, e.g.
    ``deviceProperties``, ``distributedInfo``, and ``kinetolens_run``: the
    ``*.kinetolens.json`` written beside the trace by ``kinetolens.profile``),
    ``warnings`` (what the reader skipped or repaired), and the tables:

    ``ops``: CPU ops and ``record_function`` annotations, one row per call.
        ``op_id``; ``kind`` (``op``, ``annotation``); ``cat`` (Kineto
        category); ``name``; ``pid``, ``tid``; ``ts``, ``dur``, ``end`` (ns);
        ``external_id`` (links runtime calls and kernels);
        ``sequence_number``, ``fwd_thread_id`` (autograd's); ``record_function_id``;
        ``input_dims``, ``input_types``, ``concrete_inputs`` (JSON text, with
        ``record_shapes``); ``call_stack`` (text, with ``with_stack``);
        ``python_id``, ``python_parent_id``, ``python_module_id`` (links to
        ``python``); ``collective_name``, ``in_msg_nelems``,
        ``out_msg_nelems`` (elements), ``group_size``, ``comm_dtype``,
        ``process_group_name``, ``process_group_desc`` (torch's description
        of the group: ``default_pg``, ``mesh_tp``, ...), ``process_group_ranks``
        (its global ranks, as text), ``comm_seq`` (the collective's ``Seq`` in
        its process group) (collectives); ``parent_id``, ``depth``,
        ``top_op_id`` (nesting: enclosing op, 0 at the top, outermost op);
        ``module`` (``nn.Module`` path); ``source`` (user code line,
        ``file.py:41``); ``direction`` (``fprop``, ``bprop``,
        ``optimizer``); ``fwd_op_id``, ``fwd_op`` (a backward op's forward
        op) and ``fwd_link`` (how it was found: ``fwdbwd_flow``,
        ``sequence_number``, ``creation_order``); ``grad_fn`` (autograd
        node); ``step`` (``ProfilerStep`` number); ``from_capture`` (true
        for ops copied from a CUDA/HIP graph's capture trace, instants at
        the graph's replay: see ``kinetolens.model.graph_replay``);
        ``from_next_iteration`` (true for ops copied from the next
        iteration's same call to name kernels launched before the window:
        see ``kinetolens.model.earlier_launches``).
    ``runtime``: CUDA runtime and driver calls (``cudaLaunchKernel``, ...).
        ``launch_id``; ``kind``, ``cat``, ``name``, ``pid``, ``tid``; ``ts``,
        ``dur``, ``end`` (ns); ``external_id``, ``correlation`` (links the
        GPU activity it launched); ``cbid`` (CUPTI callback id);
        ``kernel`` (the kernel a launch enqueues, where ROCm names it);
        ``contained_op_id`` (innermost op enclosing it in time); ``op_id``
        (the op it ran under) and ``op_link`` (how: ``external_id``,
        ``containment``, ``after_backward_node``); ``module``, ``source``;
        ``step``.
    ``kernels``: GPU activity, one row per kernel, memcpy or memset.
        ``kernel_id``; ``kind`` (``kernel``, ``memcpy``, ``memset``);
        ``cat``, ``name``, ``pid``, ``tid``; ``ts``, ``dur`` (ns, on the
        GPU); ``device`` (GPU index), ``stream``, ``context``;
        ``correlation``, ``external_id``; ``queued`` (Kineto's value as
        written); ``grid_x``, ``grid_y``, ``grid_z``, ``block_x``,
        ``block_y``, ``block_z`` (launch dimensions);
        ``registers_per_thread``; ``shared_memory`` (bytes per block);
        ``blocks_per_sm``, ``warps_per_sm``; ``occupancy`` (estimated, %);
        ``bytes`` (copied or set), ``memory_bw_gbps`` (GB/s, memcpy and
        memset); ``launch_id``, ``launch`` (runtime call name),
        ``launch_ts`` (ns), ``launch_tid``; ``op_id``, ``op``,
        ``top_op_id``, ``top_op`` (the op that launched it and its
        outermost op); ``direction``, ``grad_fn``, ``fwd_op_id``,
        ``fwd_op``; ``module``, ``source``; ``sub`` (0, 1, ...: its order
        among its op's kernels); ``step``; ``graph_id``, ``graph_node``
        (the CUDA/HIP graph it was replayed from and its position there;
        null for eager kernels).
    ``python``: Python function ranges (``with_stack``/``with_modules``).
        ``kind``, ``cat``, ``name``, ``pid``, ``tid``; ``ts``, ``dur``,
        ``end`` (ns); ``python_id``, ``python_parent_id``,
        ``python_module_id``; ``module`` (the ``nn.Module`` path it runs
        in); ``source`` (Nsight exports only); and the host columns of
        ``ops`` as the reader found them, mostly null here:
        ``external_id``, ``correlation``, ``sequence_number``,
        ``fwd_thread_id``, ``record_function_id``, ``input_dims``,
        ``input_types``, ``concrete_inputs``, ``call_stack``, ``cbid``,
        ``kernel``, ``collective_name``, ``in_msg_nelems``, ``out_msg_nelems``,
        ``group_size``, ``comm_dtype``, ``process_group_name``,
        ``process_group_desc``, ``process_group_ranks``, ``comm_seq``.
    ``memory``: allocator events (``profile_memory``), one per allocation
        or free. ``pid``, ``tid``; ``ts`` (ns); ``device_type``,
        ``device_id``; ``addr``; ``bytes`` (negative for a free);
        ``total_allocated``, ``total_reserved`` (bytes after the event).
    ``flows``: flow events (launch arrows, forward/backward links).
        ``ph`` (``s`` start, ``f`` finish), ``cat``, ``id``, ``pid``,
        ``tid``, ``ts`` (ns).
    ``steps``: ``ProfilerStep#N`` ranges as disjoint windows over their work.
        ``step`` (N), ``name``, ``step_op_id``; ``ts``, ``cpu_end`` (the
        host range, ns); ``gpu_end`` (end of its GPU work, ns); ``start``,
        ``end``, ``dur`` (the step's window, ns: what step time means);
        ``gpu_work``, ``host_work`` (GPU activities and host ops in it);
        ``complete`` (false for a last step the profiler cut short) and
        ``cut_reason``.
    ``device_events``: GPU annotations and CUPTI ranges, with the GPU
        columns of ``kernels`` as read: ``kind``, ``cat``, ``name``,
        ``pid``, ``tid``, ``ts``, ``dur`` (ns), ``device``, ``stream``,
        ``context``, ``correlation``, ``external_id``, ``queued``,
        ``grid_x``, ``grid_y``, ``grid_z``, ``block_x``, ``block_y``,
        ``block_z``, ``registers_per_thread``, ``shared_memory``,
        ``blocks_per_sm``, ``warps_per_sm``, ``occupancy``, ``bytes``,
        ``memory_bw_gbps``, ``graph_id``, ``graph_node``.
    ``threads``: ``pid``, ``tid``, ``name`` (thread names).
    ``processes``: ``pid``, ``name``, ``labels`` (process names, GPU labels).
    ``kernel_counters``: CUPTI range-profiler counters (``counters=``), one
        row per range and metric. ``range_id``, ``name``, ``pid``, ``tid``,
        ``ts``, ``dur`` (ns), ``metric`` (CUPTI metric name), ``value``
        (in the metric's own unit).
    ``counters``: Chrome counter events (``ph: "C"``), one row per event and
        numeric arg: ``event``, ``name``, ``cat``, ``pid``, ``tid``, ``ts``
        (ns), ``key`` (the series), ``value`` (bytes for memory samples of
        ``kinetolens.profile(sample_rate=N)``, else the counter's own unit).

    Properties: ``events`` (every duration event in one table), ``devices``
    (``deviceProperties``), ``rank``, ``world_size`` (``distributedInfo``).
    """

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
