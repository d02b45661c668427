"""The report's whole-trace tables of a trace read one step window at a time.

The op and kernel tables and the Tensor Core split are sums over calls, so
each window adds its own part (the ops that start in it and the kernels
launched then: :mod:`kinetolens.model.ownership`) and the merged
parts give the whole trace's tables, made by the code that makes them for a
trace held whole (:mod:`kinetolens.analysis.workload.op_groups`).  What a
report shows beyond them (modules, source lines, roofline, memory over time,
GPU idle time, the critical path) comes from the sample of whole steps the
summary's recommendations are taken from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import polars as pl

from kinetolens.analysis.hardware.kernels import kernel_verdicts, tensor_core_time
from kinetolens.analysis.workload.op_groups import KERNEL_LABELS, OP_LABELS, merged
from kinetolens.analysis.workload.op_groupings import GROUPINGS
from kinetolens.analysis.workload.ops import (
    kernel_groups,
    kernel_table,
    op_groups,
    op_table,
    share_whole_of,
    stepped_gpu_ns,
    wall_ns,
)
from kinetolens.model.earlier_launches import without_earlier_iteration
from kinetolens.model.trace import Trace


@dataclass(frozen=True)
class TablesPart:
    """What one window adds to the report's tables (its own events only)."""

    ops: pl.DataFrame
    kernels: pl.DataFrame
    #: ``tc, dur_us``: GPU time per Tensor Core verdict.
    tensor_cores: pl.DataFrame
    stepped_gpu_ns: int


@dataclass(frozen=True)
class WholeTables:
    """The report's tables of the whole trace: its step breakdown, as
    :func:`~kinetolens.analysis.workload.ops.op_stats` by op and by kernel,
    and the Tensor Core split (``tc, dur_us``)."""

    breakdown: pl.DataFrame
    ops: pl.DataFrame
    kernels: pl.DataFrame
    kernel_verdicts: pl.DataFrame


def groups_part(trace: Trace, own: tuple[int, int], gpu: bool, by: str = "op", inclusive: bool = False) -> pl.DataFrame:
    """A window's own part of the op table grouped ``by`` (the kernel groups for
    ``kernel``): the ops starting in ``own`` ([lo, hi) ns) and the kernels
    launched then; ``gpu``: whether the whole trace has GPU work (it decides
    what ranks ops)."""
    if by == "kernel":
        return kernel_groups(trace, own=own)
    return op_groups(without_earlier_iteration(trace), by=by, own=own, gpu=gpu, inclusive=inclusive)


def table_of(parts: Sequence[pl.DataFrame], by: str, aggregate: str, share_whole: int) -> pl.DataFrame:
    """The op table grouped ``by`` under ``aggregate`` (as
    :func:`~kinetolens.analysis.workload.ops.op_stats` gives it) from the
    windows' :func:`groups_part`; shares of ``share_whole`` ns."""
    if by == "kernel":
        return kernel_table(merged(parts, ["name"], list(KERNEL_LABELS)), aggregate, share_whole)
    return op_table(merged(parts, GROUPINGS[by], list(OP_LABELS)), by, aggregate, share_whole)


def tables_part(trace: Trace, own: tuple[int, int], gpu: bool) -> TablesPart:
    """``trace`` (a window) reduced to the part of the report's tables it owns
    (:func:`groups_part` by op and by kernel, the Tensor Core split)."""
    return TablesPart(
        ops=groups_part(trace, own, gpu),
        kernels=groups_part(trace, own, gpu, "kernel"),
        tensor_cores=tensor_core_time(kernel_verdicts(trace, own)).rename({"us": "dur_us"}),
        stepped_gpu_ns=stepped_gpu_ns(trace, own=own),
    )


def whole_tables(parts: Iterable[TablesPart], *, steps: pl.DataFrame, gpus: int, breakdown: pl.DataFrame) -> WholeTables:
    """The tables of the whole trace from its windows' parts, its steps table,
    its step breakdown (each window's row) and the number of GPUs at work (shares are of the steps' wall time once
    per GPU, or of their GPU time where streams overlapped, as for a trace
    held whole: :func:`~kinetolens.analysis.workload.ops.share_whole_ns`)."""
    held = list(parts)
    share_whole = share_whole_of(
        wall_ns(steps) * max(1, gpus), sum(p.stepped_gpu_ns for p in held)
    )
    return WholeTables(
        breakdown=breakdown,
        ops=table_of([p.ops for p in held], "op", "sum", share_whole),
        kernels=table_of([p.kernels for p in held], "kernel", "sum", share_whole),
        kernel_verdicts=pl.concat([p.tensor_cores for p in held], how="vertical_relaxed"),
    )
