"""The typed result of :func:`kinetolens.analysis.summary.summarize`.

``kinetolens summary --json`` prints it (docs/summary-json.md documents each
field), the cache keeps it beside the trace's tables and decodes it back
into these types, and the terminal, the report and ``check`` read its
fields.  Field names are the JSON keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kinetolens.analysis.finding import Finding
from kinetolens.analysis.gputime.step_times import StepRow, StepTimes
from kinetolens.analysis.inference.block import InferenceBlock
from kinetolens.analysis.trace_kind_type import TraceKind

#: Changes only when a field changes meaning or disappears.
SCHEMA_VERSION = 2


@dataclass(frozen=True, kw_only=True)
class Device:
    """A GPU the file lists in ``deviceProperties``."""

    id: int | None
    name: str | None
    memory_bytes: int | None
    sms: int | None
    compute_capability: str | None


@dataclass(frozen=True, kw_only=True)
class RunDevice:
    """The device the capture ran on, from kinetolens' run metadata."""

    type: str | None
    name: str | None


@dataclass(frozen=True, kw_only=True)
class Steps:
    """The steps and each one's breakdown (µs); see ``steps_block``."""

    count: int
    ids: tuple[int, ...]
    incomplete: tuple[int, ...]
    mean_us: float | None
    incomplete_note: str | None
    damaged: bool
    breakdown_us: tuple[StepRow, ...]
    average_us: StepTimes | None


@dataclass(frozen=True, kw_only=True)
class GpuUse:
    """How busy one GPU was (:func:`kinetolens.analysis.hardware.gpu_metrics.gpu_metrics`)."""

    device: int
    name: str | None
    utilization: float | None
    sm_efficiency: float | None
    occupancy: float | None
    tensor_core_share: float | None
    peak_allocated_bytes: int | None
    peak_basis: str | None
    live_at_start_bytes: int | None


@dataclass(frozen=True, kw_only=True)
class Events:
    """How many events of each kind the file holds."""

    ops: int
    annotations: int
    runtime: int
    python: int
    kernels: int
    memcpy: int
    memset: int
    memory: int


@dataclass(frozen=True, kw_only=True)
class PeakMemory:
    """One device's memory peak and what it covers (``basis``, in words in ``note``)."""

    device: str
    device_id: int | None
    peak_allocated: int | None
    basis: str
    live_at_start: int | None
    note: str


@dataclass(frozen=True, kw_only=True)
class Attribution:
    """Kernel time, and the fraction of it tied to an op, module, source line, forward op."""

    kernel_time_us: float
    op: float | None
    module: float | None
    source: float | None
    source_call_line: float | None
    launch: float | None
    op_of_recorded_launches: float | None
    backward_time_us: float
    backward_with_forward_op: float | None
    gpu_activity_with_op: float | None
    graph_replay_time_us: float
    graph_replay_with_capture_op: float | None
    graph_replay_with_module: float | None
    #: Whether the trace records any CPU op or range a kernel could be tied to:
    #: a GPU-only capture's 0% is no attribution that failed.
    possible: bool = True


@dataclass(frozen=True, kw_only=True)
class UnrecordedLaunches:
    """Kernel time whose launch the trace does not hold (launched before profiling began)."""

    share: float | None
    in_steps_share: float | None
    named_share: float | None
    note: str | None


@dataclass(frozen=True, kw_only=True)
class LoadWarning:
    """Recoverable damage found while loading."""

    kind: str
    count: int
    detail: str


@dataclass(frozen=True, kw_only=True)
class Summary:
    """What a trace is, where its steps' time went, how well its kernels are
    attributed, and what to change first."""

    schema_version: int
    kinetolens_version: str
    trace: str
    format: str
    kind: TraceKind
    rank: int | None
    world_size: int | None
    device: RunDevice | None
    devices: tuple[Device, ...]
    devices_used: tuple[int, ...]
    span_us: float
    steps: Steps
    inference: InferenceBlock
    gpu: tuple[GpuUse, ...]
    events: Events
    memory: tuple[PeakMemory, ...]
    attribution: Attribution
    unrecorded_launches: UnrecordedLaunches
    recommendations: tuple[Finding, ...]
    recommendations_withheld: str | None
    recommendations_left_out: str | None
    warnings: tuple[LoadWarning, ...]
    #: Set when the trace was read a step window at a time (too large to hold):
    #: which steps the kind and the recommendations come from (:mod:`kinetolens.analysis.summary_windows`).
    read_in_windows: str | None = None


def rows_of(cls: type, rows: list[dict[str, Any]]) -> tuple[Any, ...]:
    """Typed rows from a table's ``to_dicts()`` (its columns are the type's fields)."""
    return tuple(cls(**row) for row in rows)
