"""The summary and the report of a trace too large to hold, read one step window at a time.

From :data:`~kinetolens.runs.window_choice.WINDOWED_FROM_BYTES` of
(uncompressed) Kineto JSON, ``kinetolens summary`` and ``kinetolens report``
decode the file to Parquet parts in a temporary folder, find its steps, and
build each step's window in turn, keeping only what the window adds to the summary
(:mod:`kinetolens.analysis.summary_windows`) and to the report's op and
kernel tables (:mod:`kinetolens.analysis.report_windows`): memory holds a
step, not the file.  A trace without ``ProfilerStep`` ranges, with no whole
step, or of an inference engine is read whole, and a note says why.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import polars as pl

from kinetolens.analysis.inference.phases import inference_block
from kinetolens.analysis.memory.usage import PEAK_COLUMNS, peaks_of
from kinetolens.analysis.paths.sampling import SAMPLE_STEPS
from kinetolens.analysis.summary_types import Summary
from kinetolens.analysis.hardware.gpu_metrics import steps_span
from kinetolens.analysis.hardware.kernels import kernel_table
from kinetolens.analysis.report_windows import (
    TablesPart,
    WholeTables,
    groups_part,
    table_of,
    tables_part,
    whole_tables,
)
from kinetolens.analysis.workload.ops import share_note_of, share_whole_of, stepped_gpu_ns, wall_ns
from kinetolens.analysis.summary_windows import PER_WINDOW, WindowPart, summarize_windows, window_part
from kinetolens.errors import TraceError, TraceWarning, shown_path
from kinetolens.ingest.opener import StreamUnsupported
from kinetolens.ingest.spill import Spill
from kinetolens.model.earlier_launches import without_earlier_iteration
from kinetolens.model.ownership import owned_kernels
from kinetolens.model.trace import Trace
from kinetolens.registry.gpus import GpuSpec
from kinetolens.registry.words import counted
from kinetolens.windowed import StepWindow, Windowed, open_windows

if TYPE_CHECKING:
    from kinetolens.analysis.diff_sums import DiffSums
    from kinetolens.analysis.paths.whatif import Change, WhatIf
    from kinetolens.analysis.ranks.distributed import RankSummary

T = TypeVar("T")

__all__ = [
    "WindowedCompiled",
    "WindowedDiffSums",
    "WindowedMemory",
    "WindowedModules",
    "WindowedOps",
    "WindowedRoofline",
    "WindowedRead",
    "WindowedSteps",
    "WindowedWork",
    "kernels_in_windows",
    "memory_in_windows",
    "modules_in_windows",
    "ops_in_windows",
    "rank_summary_in_windows",
    "report_in_windows",
    "roofline_in_windows",
    "steps_in_windows",
    "summary_in_windows",
    "whatif_in_windows",
    "work_in_windows",
]


#: Why a trace whose graph replays kinetolens numbers is read whole for tables that name them.
NUMBERED_GRAPHS = "kinetolens numbers its CUDA/HIP graph replays across the whole trace (the trace recorded no graph ids)"


def summary_in_windows(path: Path, spill_root: Path | None = None, notes: list[str] | None = None) -> Summary | None:
    """The summary of ``path`` read a step window at a time, or None where it
    cannot be (no steps, no whole step, an inference engine's iterations, a
    file the streaming reader does not take; ``notes`` is told why): the
    caller then reads it whole.  The Parquet parts go to a temporary folder
    (under ``spill_root``), removed after."""
    read = _in_windows(path, spill_root, tables=False, notes=notes)
    return None if read is None else read.summary


@dataclass(frozen=True)
class WindowedRead:
    """A trace read a step window at a time: its summary, the report's tables
    of the whole trace (where asked for), and the sample of whole steps (a
    trace) the report's other sections are taken from, which ``sampled`` names."""

    summary: Summary
    #: None for a summary alone.
    tables: WholeTables | None
    sample: Trace
    sampled: str


def report_in_windows(path: Path, spill_root: Path | None = None, notes: list[str] | None = None) -> WindowedRead | None:
    """:func:`summary_in_windows` with the report's whole-trace tables (None where it gives none)."""
    return _in_windows(path, spill_root, tables=True, notes=notes)


def _in_windows(path: Path, spill_root: Path | None, *, tables: bool, notes: list[str] | None) -> WindowedRead | None:
    return _windowed(path, spill_root, notes, lambda windowed: _read(windowed, tables))


def _windowed(
    path: Path,
    spill_root: Path | None,
    notes: list[str] | None,
    reading: Callable[[Windowed], tuple[T | None, str]],
) -> T | None:
    """What ``reading`` makes of ``path``'s step windows, decoded into a
    temporary folder (under ``spill_root``) removed after; None where it
    cannot be read so (no ``ProfilerStep`` ranges, or what ``reading`` says),
    and ``notes`` says why."""
    with tempfile.TemporaryDirectory(prefix="kinetolens-windows-", dir=spill_root) as folder:
        try:
            windowed = open_windows(path, folder)
        except StreamUnsupported as exc:
            read, why = None, f"the file is not laid out as the streaming reader expects ({exc})"
        else:
            read, why = reading(windowed) if windowed.steps.height else (None, "it has no ProfilerStep ranges")
    if read is None and notes is not None:
        notes.append(f"{shown_path(path)}: read whole, not a step window at a time: {why}")
    return read


def _read(windowed: Windowed, tables: bool) -> tuple[WindowedRead | None, str]:
    """The read, or None and why not."""
    steps = windowed.steps
    chosen = windowed.sample(SAMPLE_STEPS)
    if chosen is None:
        return None, "it has no whole step"
    if tables and windowed.numbers_graphs():
        return None, NUMBERED_GRAPHS  # the report's op tables name a replay under no op by its graph's number
    sample = windowed.load(chosen)
    if inference_block(sample).iterations:
        return None, "it is an inference engine's trace (iterations, not steps)"
    sampled = _sampled(steps, chosen)
    note = (
        f"{_read_words(steps)}: the program's kind and the recommendations are from {sampled}"
    )
    reader = list(windowed.spill.warnings)
    held: list[TablesPart] = []
    breakdown: list[pl.DataFrame] = []
    parts = _parts(windowed, reader, held if tables else None, breakdown)
    summary = summarize_windows(parts, steps=steps, peaks=_peaks(windowed.spill), sample=sample, sampled=note, reader=reader)
    gpus = len(summary.devices_used)
    report_tables = whole_tables(held, steps=steps, gpus=gpus, breakdown=pl.concat(breakdown)) if tables else None
    return WindowedRead(summary, report_tables, sample, sampled), ""


def _sampled(steps: pl.DataFrame, chosen: StepWindow) -> str:
    """The sample's steps in words: ``steps 605-612 (8 of 1,215 whole steps)``."""
    whole = steps.filter(pl.col("complete")).height
    ids = f"step {chosen.steps[0]}" if len(chosen.steps) == 1 else f"steps {chosen.steps[0]}-{chosen.steps[-1]}"
    return f"{ids} ({len(chosen.steps)} of {counted(whole, 'whole step')})"


@dataclass(frozen=True)
class WindowedSteps:
    """Some whole steps of a trace read a step window at a time: one step, or the sample."""

    trace: Trace
    #: Which steps, in words.
    sampled: str


def steps_in_windows(
    path: Path, step: int | None, spill_root: Path | None = None, notes: list[str] | None = None
) -> WindowedSteps | None:
    """The window of ``step`` of ``path`` (None: the sample of up to
    :data:`SAMPLE_STEPS` whole steps in the middle), the trace held a step
    window at a time, not whole; None where it cannot be (``notes`` says why).
    A step the trace does not have is a :class:`TraceError`."""
    return _windowed(path, spill_root, notes, lambda windowed: _steps(windowed, step))


def _steps(windowed: Windowed, step: int | None) -> tuple[WindowedSteps | None, str]:
    if step is not None:
        return WindowedSteps(windowed.load(_window_of(windowed, step)), f"step {step}"), ""
    sample = windowed.sample(SAMPLE_STEPS)
    if sample is None:
        return None, "it has no whole step"
    return WindowedSteps(windowed.load(sample), _sampled(windowed.steps, sample)), ""


def _window_of(windowed: Windowed, step: int) -> StepWindow:
    """The window of ``step``; a step the trace does not have is a :class:`TraceError`."""
    chosen = next((w for w in windowed.windows() if w.step == step), None)
    if chosen is None:
        have = windowed.steps["step"]
        raise TraceError(shown_path(windowed.path), f"has no step {step} (steps: {have.min()}-{have.max()})")
    return chosen


def whatif_in_windows(
    path: Path, changes: list[Change], step: int | None, spill_root: Path | None = None, notes: list[str] | None = None
) -> WhatIf | None:
    """:func:`~kinetolens.analysis.paths.whatif.whatif` of ``path`` read a
    step window at a time: each whole step (or ``step``) re-timed in its own
    window, the results joined; None where it cannot be (``notes`` says why).
    A step the trace does not have is a :class:`TraceError`."""
    return _windowed(path, spill_root, notes, lambda windowed: _whatif(windowed, changes, step))


def _whatif(windowed: Windowed, changes: list[Change], step: int | None) -> tuple[WhatIf | None, str]:
    from kinetolens.analysis.paths.whatif import WhatIf, whatif

    whole = set(windowed.steps.filter(pl.col("complete"))["step"].to_list())
    chosen = [_window_of(windowed, step)] if step is not None else [w for w in windowed.windows() if w.step in whole]
    if not chosen:
        return None, "it has no whole step"
    parts = [whatif(windowed.load(window), changes, window.step) for window in chosen]
    return WhatIf.joined(parts, changes), ""


def _parts(
    windowed: Windowed, reader: list[TraceWarning], tables: list[TablesPart] | None, breakdown: list[pl.DataFrame]
) -> Iterator[WindowPart]:
    """Each window's part of the summary (and, into ``tables``, of the report's tables), a window at a time."""
    span = steps_span(windowed.steps)
    gpu = tables is not None and windowed.has_gpu_work()
    for window, trace in windowed.traces():
        part = window_part(window.step, trace, window.own, span, reader)
        breakdown.append(part.breakdown)
        if tables is not None:
            tables.append(tables_part(trace, window.own, gpu))
        yield part


@dataclass(frozen=True)
class WindowedOps:
    """An op table of a trace read a step window at a time (``kinetolens ops``)."""

    table: pl.DataFrame
    #: Whether the trace has GPU work (it decides what ranks ops).
    gpu: bool
    #: What was read, for the line the view prints.
    read: str


def ops_in_windows(
    path: Path, *, by: str, aggregate: str, inclusive: bool, spill_root: Path | None = None, notes: list[str] | None = None
) -> WindowedOps | None:
    """The op table of ``path`` grouped ``by`` (``op``, ``op+shape`` or
    ``kernel``) under ``aggregate``, read a step window at a time: each
    window's own ops and kernels grouped, the groups merged.  None where it
    cannot be (``notes`` says why; the caller reads the trace whole)."""
    return _windowed(path, spill_root, notes, lambda windowed: _ops(windowed, by, aggregate, inclusive))


def _ops(windowed: Windowed, by: str, aggregate: str, inclusive: bool) -> tuple[WindowedOps | None, str]:
    steps = windowed.steps
    if by != "kernel" and windowed.numbers_graphs():
        return None, NUMBERED_GRAPHS  # a replay under no op is named by its graph's number
    gpu = windowed.has_gpu_work()
    parts: list[pl.DataFrame] = []
    shares = _StepShares()
    for window, trace in windowed.traces():
        parts.append(groups_part(trace, window.own, gpu, by, inclusive))
        shares.add(trace, window.own)
    table = table_of(parts, by, aggregate, shares.whole_ns(steps))
    return WindowedOps(table, gpu, _read_words(steps)), ""


class _StepShares:
    """What step shares are of, summed over the windows: the steps' GPU time
    (kernels launched in each window) and the GPUs at work
    (:func:`~kinetolens.analysis.workload.ops.share_whole_ns`)."""

    def __init__(self) -> None:
        self.stepped = 0
        self.devices: set[int] = set()

    def add(self, trace: Trace, own: tuple[int, int]) -> None:
        self.stepped += stepped_gpu_ns(trace, own=own)
        self.devices.update(trace.kernels.filter(owned_kernels(*own))["device"].drop_nulls().to_list())

    def wall_ns(self, steps: pl.DataFrame) -> int:
        """The steps' wall time, once per GPU at work."""
        return wall_ns(steps) * max(1, len(self.devices))

    def whole_ns(self, steps: pl.DataFrame) -> int:
        return share_whole_of(self.wall_ns(steps), self.stepped)

    def note(self, steps: pl.DataFrame) -> str | None:
        """The line a table says where shares are of the summed GPU time (:func:`share_note_of`)."""
        return share_note_of(self.wall_ns(steps), self.stepped)


@dataclass(frozen=True)
class WindowedModules:
    """The nn.Module tree of a trace read a step window at a time (``kinetolens modules``)."""

    tree: pl.DataFrame
    #: Whether the trace has GPU work (module times are then its kernels').
    gpu: bool
    #: What the step shares are of, where that is not the steps' wall time (as share_whole_note says it).
    share_note: str | None
    #: What was read, for the line the view prints.
    read: str


def modules_in_windows(path: Path, spill_root: Path | None = None, notes: list[str] | None = None) -> WindowedModules | None:
    """The module tree of ``path`` read a step window at a time: each window's
    own kernels and ops summed per module, the sums merged; None where it
    cannot be (``notes`` says why; the caller reads the trace whole).  The
    GPU's roofline is that of the first window's device (a process drives
    GPUs of one model)."""
    return _windowed(path, spill_root, notes, _modules)


def _modules(windowed: Windowed) -> tuple[WindowedModules | None, str]:
    from kinetolens.analysis.hardware.gpu_spec import gpu_spec
    from kinetolens.analysis.hardware.module_tree import merged_tree, module_part

    steps = windowed.steps
    gpu = windowed.has_gpu_work()
    parts = []
    shares = _StepShares()
    spec = None
    for i, (window, trace) in enumerate(windowed.traces()):
        if i == 0:
            spec = gpu_spec(trace)
        parts.append(module_part(trace, spec, window.own, gpu))
        shares.add(trace, window.own)
    tree = merged_tree(parts, shares.whole_ns(steps))
    return WindowedModules(tree, gpu, shares.note(steps), _read_words(steps)), ""


@dataclass(frozen=True)
class WindowedRoofline:
    """The op calls on a roofline of a trace read a step window at a time (``kinetolens roofline``)."""

    #: :func:`~kinetolens.analysis.hardware.roofline.op_roofline`'s rows of
    #: every window's own op calls (op ids are their window's own).
    ops: pl.DataFrame
    #: Forward calls per module (``module, calls``).
    calls: pl.DataFrame
    spec: GpuSpec
    #: The FLOP formulas that failed, counted in each window (an op at a
    #: window's edge may count twice, and the warning says so).
    warnings: list[TraceWarning]
    #: The first window: what the trace is, for the words of an empty table.
    first: Trace
    #: What was read, for the line the view prints.
    read: str


def roofline_in_windows(
    path: Path, spec_of: Callable[[Trace], GpuSpec], spill_root: Path | None = None, notes: list[str] | None = None
) -> WindowedRoofline | None:
    """The op calls of ``path`` on the roofline of ``spec_of``'s GPU (asked of
    the first window; a :class:`TraceError` where it has no roof), read a
    step window at a time: each window's own calls (starting in it), with
    the kernels they launched.  None where it cannot be read so (``notes``
    says why; the caller reads the trace whole)."""
    return _windowed(path, spill_root, notes, lambda windowed: _roofline(windowed, spec_of))


def _roofline(windowed: Windowed, spec_of: Callable[[Trace], GpuSpec]) -> tuple[WindowedRoofline | None, str]:
    from kinetolens.analysis.hardware.roofline import own_op_roofline
    from kinetolens.analysis.session import warnings_of
    from kinetolens.analysis.workload.modules import module_calls
    from kinetolens.analysis.workload.work import FORMULA_FAILED

    ops: list[pl.DataFrame] = []
    calls: list[pl.DataFrame] = []
    failed: dict[str, int] = {}
    first: Trace | None = None
    spec: GpuSpec | None = None
    for window, trace in windowed.traces():
        if first is None:
            first, spec = trace, spec_of(trace)
        trace = without_earlier_iteration(trace)
        ops.append(own_op_roofline(trace, spec, window.own))
        calls.append(module_calls(trace, own=window.own))
        for w in warnings_of(trace):
            if w.kind == FORMULA_FAILED:
                failed[w.detail] = failed.get(w.detail, 0) + w.count
    if first is None or spec is None:
        return None, "it has no step window"
    merged_calls = pl.concat(calls).group_by("module").agg(pl.col("calls").sum())
    warnings = [TraceWarning(FORMULA_FAILED, n, detail + PER_WINDOW) for detail, n in sorted(failed.items())]
    return WindowedRoofline(pl.concat(ops), merged_calls, spec, warnings, first, _read_words(windowed.steps)), ""


def rank_summary_in_windows(
    path: Path, rank: int | None = None, spill_root: Path | None = None, notes: list[str] | None = None
) -> RankSummary | None:
    """:func:`~kinetolens.analysis.ranks.distributed.rank_summary` of one
    rank's trace read a step window at a time: each window's steps and the
    collective calls it owns, merged; None where it cannot be read so
    (``notes`` says why; the caller reads the trace whole)."""
    return _windowed(path, spill_root, notes, lambda windowed: _rank_summary(windowed, rank))


def _rank_summary(windowed: Windowed, rank: int | None) -> tuple[RankSummary | None, str]:
    from kinetolens.analysis.ranks.distributed import merged_rank_summary, rank_part
    from kinetolens.model.steps import incomplete_steps

    parts = [rank_part(trace, window.own, rank) for window, trace in windowed.traces()]
    if not parts:
        return None, "it has no step window"
    return merged_rank_summary(parts, incomplete_steps(windowed.steps)), ""


@dataclass(frozen=True)
class WindowedWork:
    """The GPU work ``kinetolens idle`` or ``launches`` reads, of a trace read a step window at a time."""

    #: Each window's part (``part_of``), stacked in start order.
    work: pl.DataFrame
    #: The trace's rank (0 without one).
    rank: int
    #: Whether the trace has GPU work at all.
    gpu: bool
    #: What was read, for the line the view prints.
    read: str


def work_in_windows(
    path: Path,
    part_of: Callable[[Trace, tuple[int, int], int], pl.DataFrame],
    keep_last_step: bool = False,
    spill_root: Path | None = None,
    notes: list[str] | None = None,
) -> WindowedWork | None:
    """The GPU work of ``path`` a view's tables read, a step window at a time:
    ``part_of(trace, own, i)`` of the ``i``-th window's trace (without a last
    step the profiler cut short unless ``keep_last_step``), the activities it
    owns (launched in ``own``: a launch call's activities are all in one
    window), stacked in start order: the whole trace's work, held without the
    rest of the trace.  None where it cannot be (``notes`` says why; the
    caller reads the trace whole)."""
    return _windowed(path, spill_root, notes, lambda windowed: _work(windowed, part_of, keep_last_step))


def _work(
    windowed: Windowed, part_of: Callable[[Trace, tuple[int, int], int], pl.DataFrame], keep_last_step: bool
) -> tuple[WindowedWork | None, str]:
    from kinetolens.analysis.gputime.gpu_streams import rank_of
    from kinetolens.analysis.session import whole_steps

    parts, rank = [], 0
    for i, (window, trace) in enumerate(windowed.traces()):
        if i == 0:
            rank = rank_of(trace)
        parts.append(part_of(trace if keep_last_step else whole_steps(trace), window.own, i))
    if not parts:
        return None, "it has no step window"
    work = pl.concat(parts).sort("ts", maintain_order=True)
    return WindowedWork(work, rank, windowed.has_gpu_work(), _read_words(windowed.steps)), ""


@dataclass(frozen=True)
class WindowedCompiled:
    """The torch.compile kernel table of a trace read a step window at a time (``kinetolens compiled``)."""

    table: pl.DataFrame
    #: What was read, for the line the view prints.
    read: str


def compiled_in_windows(
    path: Path, spec_of: Callable[[Trace], GpuSpec | None], spill_root: Path | None = None, notes: list[str] | None = None
) -> WindowedCompiled | None:
    """The kernels torch.compile generated in ``path``
    (:func:`~kinetolens.analysis.hardware.compiled_kernels.compiled_kernel_table`),
    read a step window at a time: each window's own calls summed, the sums
    added; the GPU's peaks are ``spec_of`` the first window.  None where it
    cannot be (``notes`` says why; the caller reads the trace whole)."""
    return _windowed(path, spill_root, notes, lambda windowed: _compiled(windowed, spec_of))


def _compiled(windowed: Windowed, spec_of: Callable[[Trace], GpuSpec | None]) -> tuple[WindowedCompiled | None, str]:
    from kinetolens.analysis.hardware.compiled_kernels import CompiledPart, compiled_part, compiled_table

    parts: list[CompiledPart] = []
    spec: GpuSpec | None = None
    for i, (window, trace) in enumerate(windowed.traces()):
        if i == 0:
            spec = spec_of(trace)
        parts.append(compiled_part(trace, spec, window.own))
    if not parts:
        return None, "it has no step window"
    return WindowedCompiled(compiled_table(parts), _read_words(windowed.steps)), ""


@dataclass(frozen=True)
class WindowedDiffSums:
    """What ``kinetolens diff`` compares of one trace, read a step window at a time."""

    sums: DiffSums
    #: What was read, for the line the view prints.
    read: str


def diff_sums_in_windows(
    path: Path, exact: bool = False, spill_root: Path | None = None, notes: list[str] | None = None
) -> WindowedDiffSums | None:
    """The sums a diff compares of ``path`` (:mod:`kinetolens.analysis.diff_sums`),
    read a step window at a time: each window's own ops and GPU work summed,
    the windows' sums added.  None where it cannot be (``notes`` says why;
    the caller reads the trace whole)."""
    return _windowed(path, spill_root, notes, lambda windowed: _diff_sums(windowed, exact))


def _diff_sums(windowed: Windowed, exact: bool) -> tuple[WindowedDiffSums | None, str]:
    from kinetolens.analysis.diff_sums import added, window_sums

    if windowed.numbers_graphs():
        return None, NUMBERED_GRAPHS  # a replay under no op is named by its graph's number
    parts = [window_sums(trace, window.step, window.own, exact) for window, trace in windowed.traces()]
    if not parts:
        return None, "it has no step window"
    return WindowedDiffSums(added(parts), _read_words(windowed.steps)), ""


@dataclass(frozen=True)
class WindowedMemory:
    """What ``kinetolens memory`` reads, of a trace read a step window at a time."""

    #: :func:`~kinetolens.analysis.memory.usage.memory_events` of every window
    #: (the events starting in it), in time order; op ids are each window's,
    #: made unique in the trace (:func:`~kinetolens.model.ownership.unique_in_trace`).
    events: pl.DataFrame
    #: :func:`~kinetolens.analysis.memory.usage.op_memory_stats`, from the windows' sums.
    op_stats: pl.DataFrame
    #: The trace's format and whether PyTorch wrote it (for the advice on recording memory).
    format: str
    pytorch: bool
    #: What was read, for the line the view prints.
    read: str


def memory_in_windows(path: Path, spill_root: Path | None = None, notes: list[str] | None = None) -> WindowedMemory | None:
    """The allocator events of ``path`` with their ops, and the op memory
    table, read a step window at a time: each window's own events (starting
    in it), their enclosing ops found in the window (which holds every range
    overlapping it), and its sums of the op table (its own calls); None where
    it cannot be (``notes`` says why; the caller reads the trace whole)."""
    return _windowed(path, spill_root, notes, _memory)


def _memory(windowed: Windowed) -> tuple[WindowedMemory | None, str]:
    from kinetolens.analysis.memory.usage import memory_events, merged_op_memory_stats, op_memory_part
    from kinetolens.analysis.trace_kind import trace_kind
    from kinetolens.formats import MEMORY_SAMPLE_EVENT
    from kinetolens.model.ownership import starts_in, unique_in_trace

    samples = windowed.spill.scan("counters").filter(pl.col("name") == MEMORY_SAMPLE_EVENT).head(1).collect()
    if samples.height:
        return None, "its memory samples (kinetolens.profile(sample_rate=N)) are read from the whole file"
    events, parts = [], []
    fmt, pytorch = "", True
    for i, (window, trace) in enumerate(windowed.traces()):
        if i == 0:
            fmt, pytorch = trace.format, trace_kind(trace).pytorch
        mine = memory_events(trace).filter(starts_in(window.own))
        parts.append(op_memory_part(mine, trace.ops, window.own))  # the window's own op ids
        events.append(mine.with_columns(unique_in_trace("op_id", i)))
    if not events:
        return None, "it has no step window"
    joined = pl.concat(events).with_columns(seq=pl.int_range(pl.len(), dtype=pl.Int64))
    return WindowedMemory(joined, merged_op_memory_stats(parts), fmt, pytorch, _read_words(windowed.steps)), ""


def kernels_in_windows(
    path: Path,
    columns: list[str],
    write: Callable[[pl.DataFrame], bool],
    spill_root: Path | None = None,
    notes: list[str] | None = None,
) -> str | None:
    """The kernel table of ``path`` (its ``columns``), read a step window at
    a time and handed to ``write`` in start order, a batch at a time
    (``write`` returns False once it has had enough: no later window is
    built).  Returns what was read, in words; None where it cannot be read
    so (``notes`` says why; the caller reads the trace whole).

    Each window's own kernels (those launched in it) are held until the next
    window's are known: a kernel launched late in a step can start after the
    next step's first one, and goes out after it, as the whole table orders
    them.  ``idx`` counts the rows in that order, ``start_us`` is from the
    trace's first kernel."""
    return _windowed(path, spill_root, notes, lambda windowed: _kernels(windowed, columns, write))


def _kernels(windowed: Windowed, columns: list[str], write: Callable[[pl.DataFrame], bool]) -> tuple[str | None, str]:
    steps = windowed.steps
    if windowed.numbers_graphs():
        return None, NUMBERED_GRAPHS
    first = windowed.first_gpu_start()
    done = 0
    held: pl.DataFrame | None = None

    def out(rows: pl.DataFrame) -> bool:
        nonlocal done
        rows = rows.with_columns(idx=pl.int_range(done, done + rows.height, dtype=rows.schema["idx"]))
        done += rows.height
        return write(rows.select(columns))

    for window, trace in windowed.traces():
        part = kernel_table(trace, own=window.own, first_ts=first)
        if held is not None and part.height:
            # What the window before holds that starts before this window's first kernel is in place.
            cut = part["start_us"].min()
            ready = held.filter(pl.col("start_us") < cut)
            if ready.height and not out(ready):
                return _read_words(steps), ""
            part = pl.concat([held.filter(pl.col("start_us") >= cut), part]).sort("start_us", maintain_order=True)
        elif held is not None:
            part = held
        held = part
    if held is not None and held.height:
        out(held)
    return _read_words(steps), ""


def _read_words(steps: pl.DataFrame) -> str:
    return f"read a step window at a time ({counted(steps.height, 'step')})"


def _peaks(spill: Spill) -> pl.DataFrame:
    """Peak memory per device from the allocator events (their columns the peaks read)."""
    columns: list[str | pl.Expr] = list(PEAK_COLUMNS)
    parts = list(spill.each_part("memory", columns))
    return peaks_of(pl.concat(parts) if parts else pl.DataFrame(schema={c: pl.Int64 for c in PEAK_COLUMNS}))
