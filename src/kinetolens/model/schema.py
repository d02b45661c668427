"""The trace model's tables, their columns, dtypes and units, declared once.

Every table of a :class:`~kinetolens.model.trace.Trace` has exactly the
columns listed here, in this order and with these polars dtypes, whatever
the source (Kineto JSON of any age, Nsight Systems, a CPU-only run): a
column a source does not record is present and null.  So code reading the
model never asks whether a column exists.

The check runs where tables are made: on the result of
:func:`kinetolens.model.build.build_trace`, after the loader's post-build
steps, and on every table read back from the cache
(:mod:`kinetolens.cache`).  A mismatch is a bug in kinetolens, not bad
input: :class:`SchemaMismatch` names the table and the column.  The
``Trace`` docstring (``help(kinetolens.Trace)``) is generated from here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TypeVar

import polars as pl

I64 = pl.Int64()
F64 = pl.Float64()
STR = pl.String()
CAT = pl.Categorical()
BOOL = pl.Boolean()
U32 = pl.UInt32()

NS = "ns"
BYTES = "bytes"


@dataclass(frozen=True)
class Column:
    """One column: its name, polars dtype, what it means and its unit (``""``: none)."""

    name: str
    dtype: pl.DataType
    meaning: str
    unit: str = ""

    def means(self, meaning: str) -> Column:
        """The same column with the meaning a particular table gives it."""
        return replace(self, meaning=meaning)


@dataclass(frozen=True)
class Table:
    """One table of the model: what a row is, and its columns in order."""

    name: str
    rows: str
    columns: tuple[Column, ...]

    @property
    def schema(self) -> dict[str, pl.DataType]:
        return {c.name: c.dtype for c in self.columns}


class SchemaMismatch(RuntimeError):
    """A model table without a declared column, with an undeclared one, or of
    another dtype: an internal error (the code that made the table is wrong)."""


def _c(name: str, dtype: pl.DataType, meaning: str, unit: str = "") -> Column:
    return Column(name, dtype, meaning, unit)


def _pick(columns: Iterable[Column], *names: str) -> tuple[Column, ...]:
    by_name = {c.name: c for c in columns}
    return tuple(by_name[n] for n in names)


# Columns of every event as a reader records it (host and device alike).
KIND = _c("kind", CAT, "event kind")
CAT_COL = _c("cat", CAT, "Kineto category")
NAME = _c("name", STR, "name")
PID = _c("pid", I64, "process id")
TID = _c("tid", I64, "thread id")
TS = _c("ts", I64, "start", NS)
DUR = _c("dur", I64, "duration", NS)
END = _c("end", I64, "end (ts + dur)", NS)
STEP = _c("step", I64, "``ProfilerStep`` number it belongs to")
MODULE = _c("module", STR, "``nn.Module`` path it runs in")
SOURCE = _c("source", STR, "user code line (``file.py:41``) or enclosing user function")

#: Host events' columns as the readers record them (``ops`` and ``python`` keep them).
HOST = (
    KIND, CAT_COL, NAME, PID, TID, TS, DUR,
    _c("external_id", I64, "Kineto External id: links runtime calls and kernels to the op"),
    _c("correlation", I64, "CUPTI/roctracer correlation id: links the GPU activity a call launched"),
    _c("sequence_number", I64, "autograd sequence number"),
    _c("fwd_thread_id", I64, "autograd forward thread id"),
    _c("record_function_id", I64, "``record_function`` id"),
    _c("input_dims", STR, "input shapes, JSON text (``record_shapes``)"),
    _c("input_types", STR, "input dtypes, JSON text (``record_shapes``)"),
    _c("concrete_inputs", STR, "scalar inputs, JSON text (``record_shapes``)"),
    _c("call_stack", STR, "Python call stack, text (``with_stack``)"),
    _c("python_id", I64, "id of its Python frame (links to ``python``)"),
    _c("python_parent_id", I64, "id of the enclosing Python frame"),
    _c("python_module_id", I64, "id of the ``nn.Module`` instance"),
    _c("cbid", I64, "CUPTI callback id"),
    _c("kernel", STR, "kernel a launch enqueues, where ROCm names it"),
    _c("collective_name", STR, "collective (``allreduce``, ...)"),
    _c("in_msg_nelems", I64, "collective input size", "elements"),
    _c("out_msg_nelems", I64, "collective output size", "elements"),
    _c("group_size", I64, "ranks in the collective's process group"),
    _c("comm_dtype", STR, "collective's element dtype"),
    _c("process_group_name", STR, "collective's process group"),
    _c("process_group_desc", STR, "torch's description of that group (``default_pg``, ``mesh_tp``, ...)"),
    _c("process_group_ranks", STR, "the group's global ranks, as text"),
    _c("comm_seq", I64, "collective's ``Seq`` in its process group"),
)

#: GPU events' columns as the readers record them (``kernels`` and ``device_events`` keep them).
DEVICE = (
    KIND, CAT_COL, NAME, PID, TID,
    TS.means("start, on the GPU"), DUR.means("duration, on the GPU"),
    _c("device", I64, "GPU index"),
    _c("stream", I64, "stream"),
    _c("context", I64, "CUDA context"),
    _c("correlation", I64, "correlation id of the runtime call that launched it"),
    _c("external_id", I64, "Kineto External id of the op that launched it"),
    _c("queued", I64, "Kineto's ``queued`` value as written"),
    _c("grid_x", I64, "grid size, x"),
    _c("grid_y", I64, "grid size, y"),
    _c("grid_z", I64, "grid size, z"),
    _c("block_x", I64, "block size, x"),
    _c("block_y", I64, "block size, y"),
    _c("block_z", I64, "block size, z"),
    _c("registers_per_thread", I64, "registers per thread"),
    _c("shared_memory", I64, "shared memory per block", BYTES),
    _c("blocks_per_sm", F64, "blocks per SM"),
    _c("warps_per_sm", F64, "warps per SM"),
    _c("occupancy", F64, "estimated occupancy", "%"),
    _c("bytes", I64, "bytes copied or set (memcpy, memset)", BYTES),
    _c("memory_bw_gbps", F64, "copy or set bandwidth (memcpy, memset)", "GB/s"),
    _c("graph_id", I64, "CUDA/HIP graph it was replayed from; null for eager work"),
    _c("graph_node", I64, "its position in that graph; null for eager work"),
)

_HOST_OP_COLUMNS = (
    "external_id", "sequence_number", "fwd_thread_id", "record_function_id", "input_dims", "input_types",
    "concrete_inputs", "call_stack", "python_id", "python_parent_id", "python_module_id", "collective_name",
    "in_msg_nelems", "out_msg_nelems", "group_size", "comm_dtype", "process_group_name", "process_group_desc",
    "process_group_ranks", "comm_seq",
)
_HOST_PYTHON_COLUMNS = (
    "kind", "cat", "name", "pid", "tid", "ts", "dur", "external_id", "correlation", "sequence_number",
    "fwd_thread_id", "record_function_id", "input_dims", "input_types", "concrete_inputs", "call_stack",
    "python_id", "python_parent_id", "python_module_id", "cbid", "kernel", "collective_name", "in_msg_nelems",
    "out_msg_nelems", "group_size", "comm_dtype", "process_group_name", "process_group_desc", "process_group_ranks",
    "comm_seq",
)

OP_ID = _c("op_id", I64, "the op's row id; elsewhere, the op it ran under")
TOP_OP_ID = _c("top_op_id", I64, "its outermost op")
DIRECTION = _c("direction", CAT, "``fprop``, ``bprop``, ``recompute`` (forward run again in backward), ``optimizer`` or ``other``")
GRAD_FN = _c("grad_fn", STR, "autograd node it runs in (backward)")
FWD_OP_ID = _c("fwd_op_id", I64, "a backward op's forward op")
FWD_OP = _c("fwd_op", STR, "that forward op's name")

OPS = Table(
    "ops",
    "CPU ops and ``record_function`` annotations, one row per call",
    (
        OP_ID.means("row id"),
        KIND.means("``op`` or ``annotation``"),
        CAT_COL, NAME, PID, TID, TS, DUR,
        *_pick(HOST, *_HOST_OP_COLUMNS),
        END,
        _c("parent_id", I64, "enclosing op (nesting); null at the top"),
        _c("depth", I64, "nesting depth, 0 at the top"),
        TOP_OP_ID.means("outermost op (an operator, not an annotation)"),
        MODULE, SOURCE, DIRECTION,
        FWD_OP_ID,
        _c("fwd_link", STR, "how the forward op was found: ``fwdbwd_flow``, ``sequence_number``, ``creation_order``"),
        GRAD_FN, FWD_OP, STEP,
        _c("from_capture", BOOL, "copied from a CUDA/HIP graph's capture trace: an instant at the graph's replay "
           "(``kinetolens.model.graph_replay``)"),
        _c("from_next_iteration", BOOL, "copied from the next iteration's same call to name kernels launched "
           "before the window (``kinetolens.model.earlier_launches``)"),
    ),
)

RUNTIME = Table(
    "runtime",
    "CUDA/HIP runtime and driver calls (``cudaLaunchKernel``, ...), one row per call",
    (
        _c("launch_id", I64, "row id"),
        KIND, CAT_COL, NAME, PID, TID, TS, DUR, END,
        *_pick(HOST, "external_id", "correlation", "cbid", "kernel"),
        _c("contained_op_id", I64, "innermost op enclosing it in time"),
        MODULE, SOURCE,
        OP_ID.means("the op it ran under"),
        _c("op_link", STR, "how that op was found: ``external_id``, ``containment``, ``after_backward_node``"),
        STEP,
    ),
)

KERNELS = Table(
    "kernels",
    "GPU activity, one row per kernel, memcpy or memset",
    (
        _c("kernel_id", I64, "row id"),
        DEVICE[0].means("``kernel``, ``memcpy`` or ``memset``"),
        *DEVICE[1:],
        _c("launch_id", I64, "the runtime call that launched it"),
        _c("launch", STR, "that call's name"),
        _c("launch_ts", I64, "that call's start", NS),
        _c("launch_tid", I64, "that call's thread"),
        OP_ID.means("the op that launched it"),
        _c("op", STR, "that op's name"),
        TOP_OP_ID.means("that op's outermost op"),
        DIRECTION, GRAD_FN, FWD_OP_ID, FWD_OP,
        _c("top_op", STR, "the outermost op's name"),
        MODULE, SOURCE,
        _c("sub", I64, "its order among its op's kernels (0, 1, ...)"),
        STEP,
    ),
)

PYTHON = Table(
    "python",
    "Python function ranges (``with_stack``/``with_modules``); the host columns of ``ops`` as read, mostly null",
    (
        *_pick(HOST, *_HOST_PYTHON_COLUMNS),
        END,
        MODULE.means("the ``nn.Module`` path it runs in"),
        SOURCE.means("user code line (Nsight exports only)"),
    ),
)

MEMORY = Table(
    "memory",
    "allocator events (``profile_memory``), one per allocation or free",
    (
        PID, TID, TS,
        _c("device_type", I64, "device type (Kineto's number)"),
        _c("device_id", I64, "device index"),
        _c("addr", I64, "address"),
        _c("bytes", I64, "size, negative for a free", BYTES),
        _c("total_allocated", I64, "allocated after the event", BYTES),
        _c("total_reserved", I64, "reserved after the event", BYTES),
    ),
)

FLOWS = Table(
    "flows",
    "flow events: forward/backward links and others (launch arrows are ``kernels.launch_id``)",
    (
        _c("ph", CAT, "``s`` start, ``f`` finish"),
        CAT_COL,
        _c("id", I64, "flow id"),
        PID, TID, TS,
    ),
)

STEPS = Table(
    "steps",
    "``ProfilerStep#N`` ranges as disjoint windows over their work",
    (
        _c("step", I64, "N"),
        NAME,
        _c("step_op_id", I64, "the ``ProfilerStep#N`` op"),
        TS.means("host range start"),
        _c("cpu_end", I64, "host range end", NS),
        _c("gpu_end", I64, "end of its GPU work", NS),
        _c("start", I64, "window start", NS),
        END.means("window end"),
        DUR.means("window length: what step time means"),
        _c("gpu_work", U32, "GPU activities in it"),
        _c("host_work", U32, "host ops in it"),
        _c("complete", BOOL, "false for a last step the profiler cut short"),
        _c("cut_reason", STR, "why it counts as cut short"),
    ),
)

DEVICE_EVENTS = Table(
    "device_events",
    "GPU annotations and CUPTI ranges, with the GPU columns of ``kernels`` as read",
    DEVICE,
)

THREADS = Table("threads", "thread names", (PID, TID, NAME.means("thread name")))

PROCESSES = Table(
    "processes", "process names and GPU labels", (PID, NAME.means("process name"), _c("labels", STR, "labels"))
)

KERNEL_COUNTERS = Table(
    "kernel_counters",
    "hardware counters per kernel (CUPTI range profiler, or Nsight Compute paired in), one row per range and metric",
    (
        _c("range_id", I64, "range id"),
        NAME.means("range name (the kernel)"),
        PID, TID, TS, DUR,
        _c("metric", STR, "CUPTI metric name"),
        _c("value", F64, "value, in the metric's own unit"),
        _c("launch_id", I64, "the kernel's launch where the source pairs it (Nsight Compute); null: paired by launch order"),
    ),
)

COUNTERS = Table(
    "counters",
    "Chrome counter events (``ph: \"C\"``), one row per event and numeric arg",
    (
        _c("event", I64, "event index"),
        NAME,
        _c("cat", STR, "category"),
        PID, TID, TS,
        _c("key", STR, "the series"),
        _c("value", F64, "bytes for memory samples of ``kinetolens.profile(sample_rate=N)``, else the counter's own unit"),
        _c("device", I64, "GPU index of a CUPTI PM-sampling track (``GPU N Counters``), else null"),
    ),
)

#: Every table of the model, in the order a Trace lists them.
SCHEMA: dict[str, Table] = {
    t.name: t
    for t in (OPS, RUNTIME, KERNELS, PYTHON, MEMORY, FLOWS, STEPS, DEVICE_EVENTS, THREADS, PROCESSES,
              KERNEL_COUNTERS, COUNTERS)
}
TABLES = tuple(SCHEMA)


def mismatch(table: str, frame: pl.DataFrame) -> str | None:
    """What is wrong with ``frame`` as the model's ``table``, or None.

    Names the first missing column, column of another dtype, or undeclared
    column; column order is not checked (:func:`conform` sets it).
    """
    declared = SCHEMA[table].schema
    found = frame.schema
    for name, dtype in declared.items():
        if name not in found:
            return f"table {table!r} has no column {name!r} (declared {dtype})"
        if found[name] != dtype:
            return f"table {table!r} column {name!r} is {found[name]}, declared {dtype}"
    extra = [c for c in found if c not in declared]
    if extra:
        return f"table {table!r} has undeclared column {extra[0]!r} ({found[extra[0]]})"
    return None


def check(table: str, frame: pl.DataFrame) -> None:
    """Raise :class:`SchemaMismatch` unless ``frame`` is the model's ``table``."""
    problem = mismatch(table, frame)
    if problem is not None:
        raise SchemaMismatch(f"trace model: {problem}")


def conform(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` checked (:func:`check`) and its columns put in the declared order."""
    check(table, frame)
    order = list(SCHEMA[table].schema)
    return frame if frame.columns == order else frame.select(order)


def _column_line(c: Column) -> str:
    unit = f", {c.unit}" if c.unit else ""
    return f"        ``{c.name}`` ({c.dtype}{unit}): {c.meaning}"


def tables_doc() -> str:
    """The tables section of the ``Trace`` docstring: each table, then one
    line per column (name, dtype, unit, meaning)."""
    parts = []
    for t in SCHEMA.values():
        parts.append(f"    ``{t.name}``: {t.rows}.")
        parts.extend(_column_line(c) for c in t.columns)
    return "\n".join(parts)


_T = TypeVar("_T")


def conform_trace(trace: _T) -> _T:
    """``trace`` (a :class:`~kinetolens.model.trace.Trace`) with every table
    checked and in declared column order; raises :class:`SchemaMismatch`."""
    tables = {name: conform(name, getattr(trace, name)) for name in TABLES}
    if all(tables[name] is getattr(trace, name) for name in TABLES):
        return trace
    return replace(trace, **tables)  # type: ignore[type-var]
