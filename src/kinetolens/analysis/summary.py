"""What a trace is, and how well its kernels are attributed.

The ``attribution`` block is the foundation's health check: the fraction of
GPU kernel time that we could tie to an op, a module, a source line, and (for
backward kernels) to the forward op they differentiate.  The ``steps`` block
breaks each step's wall time down (:mod:`kinetolens.analysis.gputime.overview`), the
``inference`` block does the same per engine iteration of an inference
trace (:mod:`kinetolens.analysis.inference.phases`), and the ``gpu`` block says how busy each GPU was
(:mod:`kinetolens.analysis.hardware.gpu_metrics`).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from kinetolens import __version__
from kinetolens.analysis.attribution_shares import attribution_parts, unrecorded_parts
from kinetolens.analysis.advice.recommendations import RuleContext, damaged_inputs, left_out, recommendations
from kinetolens.analysis.gputime.overview import average_breakdown, complete_rows, step_breakdown
from kinetolens.analysis.gputime.step_times import StepRow, StepTimes
from kinetolens.analysis.hardware.gpu_metrics import gpu_metrics
from kinetolens.analysis.inference.phases import inference_block
from kinetolens.analysis.memory.basis import BASIS_NOTES
from kinetolens.analysis.memory.usage import peak_memory
from kinetolens.analysis.session import warnings_of, whole_steps
from kinetolens.analysis.summary_types import (
    SCHEMA_VERSION,
    Attribution,
    Device,
    Events,
    GpuUse,
    LoadWarning,
    PeakMemory,
    RunDevice,
    Steps,
    Summary,
    UnrecordedLaunches,
    rows_of,
)
from kinetolens.analysis.trace_kind import trace_kind
from kinetolens.formats import RUN_METADATA_KEY
from kinetolens.model.devices import device_name
from kinetolens.model.trace import Trace

def attribution(trace: Trace) -> Attribution:
    """Kernel time and the fraction of it tied to an op, module, source line, forward op."""
    return attribution_parts(trace).attribution(possible=trace.ops.height > 0)


def _recorded_counts(ops: pl.DataFrame) -> dict[str, int]:
    """How many ops and annotations the trace file itself holds (not those
    copied from a capture trace), counted in one query (a filter copied the
    widest table twice)."""
    own = ~(pl.col("from_capture") | pl.col("from_next_iteration"))
    row = ops.select(**{kind: (own & (pl.col("kind") == kind)).sum() for kind in ("op", "annotation")}).row(0, named=True)
    return {kind: int(n or 0) for kind, n in row.items()}


def unrecorded_launches(trace: Trace) -> UnrecordedLaunches:
    """Kernel time whose launch the trace does not hold, and what that means.

    Such kernels were launched before the profiler started (or CUPTI dropped
    the launch record): no tool can name their op, module or source line.
    ``share`` is of all kernel time, ``in_steps_share`` the part of it that
    ran inside the steps (counted in their kernel time, without an op);
    ``named_share`` the part of it named by the same launches one iteration
    later (:mod:`kinetolens.model.earlier_launches`);
    ``note`` says so in one line, or is null when every launch is recorded.
    """
    return unrecorded_parts(trace).launches()


def _us(ns: float) -> float:
    return float(ns) / 1000.0


def incomplete_note(steps: pl.DataFrame) -> str | None:
    """One line naming the step cut short and the evidence, or None."""
    cut = steps.filter(~pl.col("complete"))
    if cut.height == 0:
        return None
    row = cut.row(0, named=True)
    return f"step {row['step']} was cut short when profiling stopped ({row['cut_reason']}): left out of the means"


def steps_block(trace: Trace, table: pl.DataFrame | None = None) -> Steps:
    """Steps with their time breakdown in microseconds.

    A step's time is its window (:mod:`kinetolens.model.steps`), the same in
    every view.  ``mean_us`` is the mean over the whole steps, so it equals
    ``average_us.total``; a last step the profiler cut short keeps its row
    (``complete`` false) and is named in ``incomplete`` but counts in
    neither.  Without ProfilerStep ranges ``count`` is 0 and
    ``breakdown_us`` holds one row (``step`` null) for the whole trace.
    """
    table = step_breakdown(trace) if table is None else table
    return steps_of(trace.steps, table, damaged=damaged_inputs(trace) is not None)


def steps_of(steps: pl.DataFrame, table: pl.DataFrame, damaged: bool) -> Steps:
    """:func:`steps_block` from the steps table and the step breakdown."""
    real = table.filter(pl.col("step").is_not_null())
    whole = complete_rows(real)
    rows = tuple(
        StepRow(**vars(StepTimes.from_ns(row)), step=row["step"], complete=bool(row.get("complete", True)))
        for row in table.iter_rows(named=True)
    )
    return Steps(
        count=real.height,
        ids=tuple(int(s) for s in real["step"].to_list()),
        incomplete=tuple(int(s) for s in real.filter(~pl.col("step").is_in(whole["step"].implode()))["step"].to_list()),
        mean_us=_us(whole["total"].mean()) if whole.height else None,  # type: ignore[arg-type]
        incomplete_note=incomplete_note(steps),
        damaged=damaged,
        breakdown_us=rows,
        average_us=StepTimes.from_ns(average_breakdown(table)) if table.height else None,
    )


def memory_block(trace: Trace) -> tuple[PeakMemory, ...]:
    """Peak memory per device (:func:`memory.peak_memory`, the memory view's
    numbers) with what each peak covers, in words."""
    return memory_block_of(peak_memory(trace))


def memory_block_of(peaks: pl.DataFrame) -> tuple[PeakMemory, ...]:
    """:func:`memory_block` from the peaks table (:func:`~kinetolens.analysis.memory.usage.peak_memory`'s columns)."""
    rows = peaks.select("device", "device_id", "peak_allocated", "basis", "live_at_start").to_dicts()
    return rows_of(PeakMemory, [{**row, "note": BASIS_NOTES[row["basis"]]} for row in rows])


def gpu_block(trace: Trace, table: pl.DataFrame | None = None) -> tuple[GpuUse, ...]:
    return rows_of(GpuUse, (gpu_metrics(trace) if table is None else table).to_dicts())


def run_identity(trace: Trace) -> dict[str, Any]:
    """Rank, world size and device of the process that wrote ``trace``.

    Kineto writes ``distributedInfo`` only for distributed jobs and
    ``deviceProperties`` only for GPUs; the ``*.kinetolens.json`` that
    ``kinetolens.profile`` writes beside each trace records all three for
    every capture (a single CPU process is rank 0 of 1).  The trace's own
    fields win where both exist.
    """
    run = trace.metadata.get(RUN_METADATA_KEY)
    run = run if isinstance(run, dict) else {}
    device = run.get("device")

    def whole(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return {
        "rank": trace.rank if trace.rank is not None else whole(run.get("rank")),
        "world_size": trace.world_size if trace.world_size is not None else whole(run.get("world_size")),
        "device": RunDevice(type=device.get("type"), name=device.get("name")) if isinstance(device, dict) else None,
    }


def listed_devices(trace: Trace) -> tuple[Device, ...]:
    """The GPUs the file lists (``deviceProperties``)."""
    return tuple(
        Device(
            id=d.get("id"),
            name=device_name(d),
            memory_bytes=d.get("totalGlobalMem"),
            sms=d.get("numSms"),
            compute_capability=(
                f"{d['computeMajor']}.{d['computeMinor']}" if "computeMajor" in d and "computeMinor" in d else None
            ),
        )
        for d in trace.devices
    )


def span_of(trace: Trace) -> tuple[int, int] | None:
    """First start and last end (ns) of the ops, kernels and runtime calls."""
    parts = [t for t in (trace.ops, trace.kernels, trace.runtime) if t.height]
    if not parts:
        return None
    start = min(int(t["ts"].min()) for t in parts)  # type: ignore[arg-type]
    end = max(int((t["ts"] + t["dur"]).max()) for t in parts)  # type: ignore[arg-type]
    return start, end


def event_counts(trace: Trace, owned: pl.Expr | None = None, owned_kernels: pl.Expr | None = None) -> Events:
    """How many events of each kind the file holds (of those ``owned`` and
    ``owned_kernels`` select, by default all)."""

    def rows(frame: pl.DataFrame, keep: pl.Expr | None = owned) -> pl.DataFrame:
        if keep is None:
            return frame
        used = ("ts", "launch_ts", "kind", "from_capture", "from_next_iteration")
        return frame.select(c for c in used if c in frame.columns).filter(keep)

    kernels = rows(trace.kernels, owned_kernels)
    kinds = kernels.group_by("kind").len() if kernels.height else None
    counts = {str(k): int(v) for k, v in kinds.iter_rows()} if kinds is not None else {}
    recorded = _recorded_counts(rows(trace.ops))
    return Events(
        # the file's own: ops copied from a graph capture trace are not its events
        ops=recorded["op"],
        annotations=recorded["annotation"],
        runtime=rows(trace.runtime).height,
        python=rows(trace.python).height,
        kernels=counts.get("kernel", 0),
        memcpy=counts.get("memcpy", 0),
        memset=counts.get("memset", 0),
        memory=rows(trace.memory).height,
    )


def program_fields(trace: Trace) -> dict[str, Any]:
    """The summary's fields about the program rather than sums over its events:
    what it is, who ran it, on what, and what to change first."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kinetolens_version": __version__,
        "trace": trace.path,
        "format": trace.format,
        "kind": trace_kind(whole_steps(trace)),
        **run_identity(trace),
        "devices": listed_devices(trace),
        # An inference trace's engine iterations and phases (docs/inference.md).
        "inference": inference_block(trace),
        "recommendations": tuple(recommendations(trace)),
        "recommendations_withheld": damaged_inputs(trace),
        "recommendations_left_out": left_out(trace),
    }


def summarize(trace: Trace) -> Summary:
    """What ``kinetolens summary`` shows (``--json``: docs/summary-json.md)."""
    # The base results (breakdown, utilization, findings) come from the
    # trace's analysis session: computed once for the blocks and the rules.
    mine = RuleContext(trace)
    used = tuple(sorted({int(x) for x in trace.kernels["device"].drop_nulls().unique().to_list()})) if trace.kernels.height else ()
    span = span_of(trace)
    return Summary(
        **program_fields(trace),
        devices_used=used,
        span_us=(span[1] - span[0]) / 1000.0 if span else 0.0,
        steps=steps_block(trace, mine.breakdown),
        gpu=gpu_block(trace, mine.gpu_metrics),
        events=event_counts(trace),
        memory=memory_block(trace),
        attribution=attribution(trace),
        unrecorded_launches=unrecorded_launches(trace),
        warnings=tuple(LoadWarning(kind=w.kind, count=w.count, detail=w.detail) for w in warnings_of(trace)),
    )
