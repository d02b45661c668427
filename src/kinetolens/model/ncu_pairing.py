"""Nsight Compute's per-kernel counters paired with the trace's kernels.

Nsight Compute and the PyTorch profiler cannot record the same run: both
subscribe to CUPTI, and under ``ncu`` Kineto records no GPU activity
(``CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED``).  So the counters come
from a second run of the same step, and each profiled kernel is paired with
one of the trace's by what both runs agree on: the kernel's function (the
two tools spell names differently,
:func:`kinetolens.registry.kernel_names.kernel_function`), its grid and its
block, in launch order (:func:`align`), so kernels only one side has (a
memset, a kernel outside ncu's ``--launch-skip``/``--launch-count`` range
or its ``-k`` filter) leave the rest in step.  Kernels ncu profiled that the trace
does not have are counted in a warning, never paired by guess.

The result is the trace's ``kernel_counters`` table with each row's
``launch_id`` set: the explicit link the analyses follow to the launch and
its op (:mod:`kinetolens.analysis.hardware.counters`).
"""

from __future__ import annotations

import bisect
import dataclasses

import polars as pl

from kinetolens.errors import TraceWarning
from kinetolens.ingest.kineto_counters import COUNTER_SCHEMA
from kinetolens.ingest.ncu_csv import NcuKernels
from kinetolens.model.trace import Trace
from kinetolens.registry.kernel_names import kernel_function

#: Metadata key naming the Nsight Compute CSV paired into the trace.
NCU_KEY = "ncu_counters"
_DIMS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


def launch_ordered_kernels(trace: Trace) -> pl.DataFrame:
    """The trace's kernels (no memcpy/memset) in the order they were launched."""
    launches = trace.runtime.select("launch_id", launch_ts="ts")
    kernels = trace.kernels.filter(pl.col("kind").cast(pl.String) == "kernel")
    return (
        kernels.join(launches, on="launch_id", how="left")
        .with_columns(order_ts=pl.coalesce("launch_ts", "ts"))
        .sort(["order_ts", "ts", "kernel_id"])
    )


def _keys(frame: pl.DataFrame, name: str) -> list[tuple[object, ...]]:
    functions = [kernel_function(n) for n in frame[name].to_list()]
    dims = frame.select(_DIMS).rows()
    return [(f, *d) for f, d in zip(functions, dims)]


#: How far past the last paired kernel the next profiled one may pair without
#: the rows after it confirming the jump.
REACH = 256
#: How many following profiled kernels must pair in step to confirm a longer jump.
CONFIRM = 3


def align(ours: list[tuple[object, ...]], theirs: list[tuple[object, ...]]) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)`` with ``ours[i] == theirs[j]``, increasing in both.

    Each of ``theirs`` in turn takes the next of ``ours`` with its key.  A
    match more than :data:`REACH` ahead is taken only where the next
    :data:`CONFIRM` keys of ``theirs`` follow it in step (ncu's
    ``--launch-skip``); otherwise the row is left unpaired (a kernel the
    trace does not have, whose key recurs later).  Not longest matching
    blocks (difflib): on a step's repeated layer and optimizer kernels they
    anchor on the wrong repeat and leave kernels unpaired.
    """
    if ours == theirs:
        return [(i, i) for i in range(len(ours))]
    positions: dict[tuple[object, ...], list[int]] = {}
    for i, key in enumerate(ours):
        positions.setdefault(key, []).append(i)

    def next_at(key: tuple[object, ...], start: int) -> int | None:
        where = positions.get(key)
        if not where:
            return None
        k = bisect.bisect_left(where, start)
        return where[k] if k < len(where) else None

    def confirmed(i: int, j: int) -> bool:
        start = i + 1
        for key in theirs[j + 1 : j + 1 + CONFIRM]:
            k = next_at(key, start)
            if k is None or k - start > REACH:
                return False
            start = k + 1
        return True

    pairs: list[tuple[int, int]] = []
    start = 0
    for j, key in enumerate(theirs):
        i = next_at(key, start)
        if i is None or (i - start > REACH and not confirmed(i, j)):
            continue
        pairs.append((i, j))
        start = i + 1
    return pairs


def pair_ncu(trace: Trace, ncu: NcuKernels) -> Trace:
    """``trace`` with ``ncu``'s counters as its ``kernel_counters``, each row
    linked to the launch of the kernel it was paired with; a warning counts
    the profiled kernels the trace does not have.  A step of the loader."""
    kernels = launch_ordered_kernels(trace)
    pairs = align(_keys(kernels, "name"), _keys(ncu.frame, "kernel"))
    rows = [pl.all().gather(pl.Series([p[side] for p in pairs], dtype=pl.UInt32)) for side in (0, 1)]
    linked = pl.concat(
        [
            pl.DataFrame({"range_id": [j for _, j in pairs]}, schema={"range_id": pl.Int64}),
            kernels.select("name", "pid", "tid", "ts", "dur", "launch_id").select(rows[0]),
            ncu.frame.select(ncu.metrics).select(rows[1]),
        ],
        how="horizontal",
    )
    long = linked.unpivot(on=ncu.metrics, index=["range_id", "name", "pid", "tid", "ts", "dur", "launch_id"],
                          variable_name="metric", value_name="value")
    counters = long.drop_nulls("value").select(*COUNTER_SCHEMA).sort(["range_id", "metric"]).cast(COUNTER_SCHEMA)  # type: ignore[arg-type]
    warnings = list(ncu.warnings)
    missing = ncu.frame.height - len(pairs)
    if missing:
        warnings.append(TraceWarning(
            "Nsight Compute kernels not in the trace", missing,
            f"of {ncu.frame.height} profiled in {ncu.path}, no kernel of the trace has their name, grid and block "
            "at that point of the launch order (another step or process?); their counters are left out",
        ))
    return dataclasses.replace(
        trace,
        kernel_counters=counters,
        metadata={**trace.metadata, NCU_KEY: ncu.path},
        warnings=[*trace.warnings, *warnings],
    )
