"""Kernels launched before the profiling window, named by the next iteration.

A profiler whose window opens while the GPU still runs the previous
iteration (a warm-up step's kernels draining during the first recorded
step's synchronize) records those kernels but not their launches: no
runtime call, so no op, module, shapes or FLOPs.  The trace still says
which launches they were when the program repeats itself: CUPTI and
roctracer number every runtime call in order (``correlation``), so in a
loop running the same calls each iteration, a kernel of the previous
iteration has the correlation id of its twin in the next one minus one
iteration's count of calls.

That count is the first recorded step's: the ids from its first runtime
call to the first call after its ``ProfilerStep#N`` range.  It is used only
when the unlaunched kernels all precede the step and *every* one finds, that
many ids on, a recorded launch of a kernel of the same name (a search for
any fitting shift would not do: a model's layers repeat, so shifts by whole
layers fit every name too).  Then each takes a copy of its twin's op (with
its ancestors): the same call one iteration earlier, same shapes, module
and source (not the ``ProfilerStep#N`` range around it: that names the next
iteration), and a backward op's forward op.  The copies are appended to
``ops`` flagged ``from_next_iteration``, instants (``dur`` 0) at the first
such kernel's start; the kernels keep no ``launch_id`` (none was recorded).
Where the trace has no step, or the length does not fit every kernel,
nothing is inferred: the kernels stay without an op, and the summary says
why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import polars as pl

from kinetolens.model.graph_replay import KERNEL_OP_COLUMNS, appended_ops, copy_values, op_copies, set_by_kernel
from kinetolens.model.vocabulary import STEP_PREFIX
from kinetolens.model.trace import Trace

I64 = pl.Int64
#: The ops column flagging the copies made here.
FLAG = "from_next_iteration"


@dataclass
class Aligned:
    """What :func:`name_earlier_launches` returns."""

    ops: pl.DataFrame
    kernels: pl.DataFrame
    #: runtime calls per iteration (correlation ids between twins); None when nothing was aligned
    period: int | None = None
    #: kernels named by their twin
    kernels_named: int = 0


def _unlaunched(kernels: pl.DataFrame) -> pl.DataFrame:
    # Columns picked before rows: filtering the kernel table copied every column.
    return kernels.select(
        "kernel_id", "name", "ts", "step", corr=pl.col("correlation").cast(I64),
        keep=pl.col("launch_id").is_null() & pl.col("op_id").is_null() & pl.col("correlation").is_not_null()
        & pl.col("graph_id").is_null(),
    ).filter("keep").drop("keep")


def _launched(kernels: pl.DataFrame) -> pl.DataFrame:
    return kernels.select(
        "name", "op_id", "module", "source", corr=pl.col("correlation").cast(I64),
        keep=pl.col("launch_id").is_not_null() & pl.col("op_id").is_not_null() & pl.col("correlation").is_not_null(),
    ).filter("keep").drop("keep")


def iteration_length(steps: pl.DataFrame, runtime: pl.DataFrame) -> tuple[int, int] | None:
    """(first correlation id of the first recorded step, runtime calls per
    iteration): the ids from that step's first call to the first call after
    its host range (or its last call + 1)."""
    if steps.height == 0:
        return None
    first = steps.sort("ts").row(0, named=True)
    rt = runtime.filter(pl.col("correlation").is_not_null()).select("ts", corr=pl.col("correlation").cast(I64))
    inside = rt.filter((pl.col("ts") >= first["ts"]) & (pl.col("ts") < first["cpu_end"]))
    if inside.height == 0:
        return None
    after = rt.filter(pl.col("ts") >= first["cpu_end"])["corr"].min()
    begin = int(inside["corr"].min())
    end = int(after) if after is not None else int(inside["corr"].max()) + 1
    return begin, end - begin


def find_period(unlaunched: pl.DataFrame, launched: pl.DataFrame, begin: int, length: int) -> int | None:
    """``length`` when the unlaunched kernels all precede the step opening at
    correlation ``begin`` and every one's ``corr + length`` is a recorded
    launch of a kernel of the same name; else None.

    The length comes from the step, not from a search: the layers of a model
    repeat, so shifts by a few layers also match every name (with another
    layer's module and, at the model's ends, another op's shapes).
    """
    if unlaunched["corr"].max() >= begin:
        return None
    twins = unlaunched.select("name", twin=pl.col("corr") + length).join(
        launched.select("name", twin="corr"), on=["name", "twin"], how="inner"
    )
    return length if twins.height == unlaunched.height else None


def name_earlier_launches(trace: Trace) -> Trace:
    """``trace`` with the unlaunched kernels linked to copies of their twins'
    ops (appended, :data:`FLAG` true), when the first step's length fits
    them all; else ``trace`` itself.  A step of the loader's pipeline."""
    aligned = align_earlier_launches(trace.ops, trace.kernels, trace.steps, trace.runtime)
    if aligned.period is None:
        return trace
    return dataclasses.replace(trace, ops=aligned.ops, kernels=aligned.kernels)


def align_earlier_launches(
    ops: pl.DataFrame, kernels: pl.DataFrame, steps: pl.DataFrame, runtime: pl.DataFrame
) -> Aligned:
    """``ops`` with the copies appended and ``kernels`` with the unlaunched
    ones linked to them, when the first step's length fits them all."""
    unlaunched = _unlaunched(kernels)
    if unlaunched.height == 0:
        return Aligned(ops, kernels)
    found = iteration_length(steps, runtime)
    if found is None:
        return Aligned(ops, kernels)
    period = find_period(unlaunched, _launched(kernels), *found)
    if period is None:
        return Aligned(ops, kernels)
    launched = _launched(kernels)
    linked = unlaunched.with_columns(twin=pl.col("corr") + period).join(
        launched.select("name", twin="corr", cap_op_id="op_id", cap_module="module", cap_source="source"),
        on=["name", "twin"],
        how="inner",
    )
    # The step range is the next iteration's own: its copy would be a step
    # the trace never recorded, so the copies stop below it.
    steps = ops.filter(pl.col("name").str.starts_with(STEP_PREFIX)).select(cap_op_id="op_id")
    linked = linked.join(steps, on="cap_op_id", how="anti")
    if linked.height == 0:
        return Aligned(ops, kernels)
    # One group of copies: the whole earlier iteration's part in the window.
    used = linked.select(launch_id=pl.lit(0, I64), cap_op_id="cap_op_id")
    copies = op_copies(used, ops, first_id=ops.height, skip=steps)
    # Backward ops differentiate forward ops of their own iteration: those
    # are copied too (they launched nothing in the window).
    forward = ops.join(copies.select(op_id="cap_op_id"), on="op_id", how="semi")["fwd_op_id"].drop_nulls()
    if forward.len():
        more = pl.DataFrame({"cap_op_id": forward.unique().cast(I64)}).join(steps, on="cap_op_id", how="anti")
        used = pl.concat([used, more.select(launch_id=pl.lit(0, I64), cap_op_id="cap_op_id")])
        copies = op_copies(used, ops, first_id=ops.height, skip=steps)
    first = unlaunched.sort("ts").row(0, named=True)
    at = copies.with_columns(at=pl.lit(first["ts"], I64), at_step=pl.lit(first["step"], I64))
    appended = appended_ops(at, ops, ops, flag=FLAG, forward_links=True).with_columns(from_capture=pl.lit(False))
    new_ops = pl.concat([ops, _depths(appended)], how="vertical_relaxed")
    ids = copies.select("cap_op_id", "op_id")
    values = copy_values(
        linked.join(ids, on="cap_op_id", how="left").select("kernel_id", "op_id", "cap_module", "cap_source"),
        new_ops,
    )
    kernels = set_by_kernel(kernels, values.select("kernel_id", *KERNEL_OP_COLUMNS), KERNEL_OP_COLUMNS)
    named = pl.col("kernel_id").is_in(linked["kernel_id"].implode())
    sub = (pl.col("ts").rank("ordinal").over("op_id") - 1).cast(I64)
    kernels = kernels.with_columns(sub=pl.when(named).then(sub).otherwise(pl.col("sub")))
    return Aligned(new_ops, kernels, period=period, kernels_named=linked.height)


def _depths(copies: pl.DataFrame) -> pl.DataFrame:
    """The copies' ``depth`` anew: 0 for those whose parent was left out."""
    depth = copies.select("op_id", "parent_id").with_columns(depth=pl.when(pl.col("parent_id").is_null()).then(0))
    while depth["depth"].null_count():
        known = depth.filter(pl.col("depth").is_not_null()).select(parent_id="op_id", up="depth")
        depth = depth.join(known, on="parent_id", how="left", maintain_order="left").select(
            "op_id", "parent_id", depth=pl.coalesce("depth", pl.col("up") + 1)
        )
    return copies.with_columns(depth["depth"].cast(copies.schema["depth"]))


def without_earlier_iteration(trace: Trace) -> Trace:
    """``trace`` without the copies made here and the kernels linked to them:
    what per-step figures divide by the recorded steps (the earlier
    iteration's tail lies outside every step)."""
    if not trace.ops[FLAG].any():
        return trace
    copies = trace.ops.filter(pl.col(FLAG))["op_id"].implode()
    return dataclasses.replace(
        trace,
        ops=trace.ops.filter(~pl.col(FLAG)),
        kernels=trace.kernels.filter(~pl.col("op_id").is_in(copies).fill_null(False)),
    )
