"""Op statistics grouped and filtered as MegEngine's ``profile_analyze`` did.

Grouping keys: ``op`` (name), ``op+shape`` (name and input shapes),
``module``, ``source``, and ``kernel`` (GPU kernels by name).  Every number
comes from :func:`op_instances`; this module only groups and orders them.

``aggregate`` says how a group's times, FLOPs and bytes are taken: ``sum``,
``mean``, ``max`` or ``min`` over its calls; ``count`` ranks groups by
``calls`` and keeps the sums (a count of microseconds means nothing).
``calls``, ``step_share_pct`` (of the summed ranking time), ``tflops_s`` and
``gbps`` (summed work over summed time) are the same under every aggregate.
Attributes that are not the key (``in_shapes``, ``dtypes``, ``direction``,
a kernel's ``op``) are the group's value when all its calls agree, else
say the group is mixed (:mod:`kinetolens.analysis.workload.group_labels`).  A
kernel name's ``blocks_per_sm`` and ``occupancy`` are weighted by duration.

Ops nest (``aten::conv2d`` > ``aten::convolution`` > ``aten::_convolution``
> ``aten::cudnn_convolution``), so their total times count the same GPU
work once per level.  Op groupings therefore rank by *self* time and take
their step share of it, as torch-tb-profiler's operator view does: each
microsecond of GPU time is in one row and the shares sum to at most 100%.
``inclusive=True`` ranks by total time instead (shares then overlap).
Module and source groupings keep only top-level ops, whose totals are
already disjoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kinetolens.analysis.gputime.overview import step_windows
from kinetolens.analysis.session import per_trace
from kinetolens.analysis.workload.group_labels import counts, listed
from kinetolens.analysis.workload.op_groupings import AGGREGATES, GROUPINGS
from kinetolens.analysis.workload.op_groups import (
    OP_LABELS,
    achieved,
    figure_parts,
    step_share,
    taken,
    weighted,
    weighted_of,
)
from kinetolens.analysis.workload.modules import with_module_calls
from kinetolens.analysis.workload.op_times import op_instances
from kinetolens.analysis.workload.work import kernel_work
from kinetolens.model.nesting import nearest_marked, outermost_marked
from kinetolens.model.earlier_launches import without_earlier_iteration
from kinetolens.model.ownership import owned_kernels, starts_in
from kinetolens.model.trace import Trace
from kinetolens.model.vocabulary import NCCL_PREFIX, STEP_PREFIX

TIME_COLUMNS = ("device_self_us", "device_total_us", "host_self_us", "host_total_us")
#: Columns whose values add up over groups whatever the aggregate (a running
#: total of them means something); the time, FLOPs and bytes columns add up
#: only under ``sum`` and ``count`` (see :func:`additive`).
ALWAYS_ADDITIVE = ("calls", "step_share_pct", "lost_us")
_SUMMED = (*TIME_COLUMNS, "flops", "bytes")


def additive(column: str, aggregate: str) -> bool:
    """Whether ``column`` of an :func:`op_stats` table taken with ``aggregate`` sums over groups."""
    return column in ALWAYS_ADDITIVE or (column in _SUMMED and aggregate in ("sum", "count"))


def default_order(trace: Trace, by: str, aggregate: str, *, inclusive: bool = False) -> str:
    """The column a table of ``op_stats(trace, by=by, aggregate=aggregate)`` is ranked by."""
    return default_order_of(trace.kernels.height > 0, by, aggregate, inclusive=inclusive)


def default_order_of(gpu: bool, by: str, aggregate: str, *, inclusive: bool = False) -> str:
    """:func:`default_order` of a trace with (``gpu``) or without GPU work."""
    if aggregate == "count":
        return "calls"
    if by == "kernel":
        return "device_total_us"  # kernels have only device time
    return rank_basis_of(gpu, by, inclusive=inclusive)


def rank_basis(trace: Trace, by: str = "op", *, inclusive: bool = False) -> str:
    """The time column that ranks ``by`` groups and makes their step share:
    self time for op groupings (nested ops would count their children's
    work again), total time for the rest or with ``inclusive``."""
    return rank_basis_of(trace.kernels.height > 0, by, inclusive=inclusive)


def rank_basis_of(gpu: bool, by: str = "op", *, inclusive: bool = False) -> str:
    """:func:`rank_basis` of a trace with (``gpu``) or without GPU work."""
    basis = time_basis_of(gpu)
    if by in ("op", "op+shape") and not inclusive:
        return basis.replace("_total_", "_self_")
    return "device_total_us" if by == "kernel" else basis


def step_time_ns(trace: Trace, step: int | None = None) -> int:
    """Time the shares are taken of: the steps' windows as the overview
    cuts them (disjoint, so GPU work that runs past a step is not counted
    twice), or the whole trace's window when it has no steps; only ``step``'s
    window when one is given; once per GPU at work (:func:`gpus_at_work`)."""
    return steps_wall_ns(trace, step) * gpus_at_work(trace)


def steps_wall_ns(trace: Trace, step: int | None = None) -> int:
    """The wall time of the steps' windows (of ``step``'s alone when given)."""
    windows = step_windows(trace)
    return wall_ns(windows if step is None else windows.filter(pl.col("step") == step))


def wall_ns(windows: pl.DataFrame) -> int:
    """The summed length of step windows (``start``, ``end``; :func:`step_windows`)."""
    return int((windows["end"] - windows["start"]).sum()) if windows.height else 0


def gpus_at_work(trace: Trace) -> int:
    """How many GPUs ran the trace's device time (1 without GPU work).

    A process driving two GPUs (or an Nsight export of two) spends up to
    twice the wall time in device time: shares of device time are taken of
    the wall time once per GPU, so each GPU's work is at most its part and
    the shares stay at most 100%."""
    if not trace.kernels.height:
        return 1
    return max(1, trace.kernels["device"].drop_nulls().n_unique())


def share_whole_ns(trace: Trace, step: int | None = None) -> int:
    """What step shares are of: the steps' wall time (:func:`step_time_ns`),
    or, where GPU streams ran at once, the GPU time in the steps summed over
    the streams when that is longer (then summed shares of device time would
    pass the wall time: each share is of the summed device time instead, and
    :func:`share_whole_note` says so)."""
    return share_whole_of(step_time_ns(trace, step), stepped_gpu_ns(trace, step))


def share_whole_of(wall_ns: int, stepped_gpu: int) -> int:
    """:func:`share_whole_ns` from the steps' wall time (once per GPU) and their GPU time."""
    return max(wall_ns, stepped_gpu)


def share_whole_note(trace: Trace, step: int | None = None) -> str | None:
    """The line a table of step shares prints when they are of summed GPU time (None when of the wall time)."""
    return share_note_of(step_time_ns(trace, step), stepped_gpu_ns(trace, step))


def share_note_of(wall: int, gpu: int) -> str | None:
    """:func:`share_whole_note` from the steps' wall time (once per GPU) and their GPU time (ns)."""
    if gpu <= wall:
        return None
    return (
        f"% step: of the steps' GPU time summed over streams ({gpu / 1e6:,.2f} ms), which ran at once and "
        f"exceed the steps' wall time ({wall / 1e6:,.2f} ms)"
    )


def stepped_gpu_ns(trace: Trace, step: int | None = None, own: tuple[int, int] | None = None) -> int:
    """Device time of the kernels a step share may count: in a step by their
    own time or by their op's; ``own`` ([lo, hi) ns) keeps those launched then."""
    trace = without_earlier_iteration(trace)
    k = trace.kernels if own is None else trace.kernels.filter(owned_kernels(*own))
    k = k.select("op_id", "step", "dur").filter(pl.col("dur") > 0)
    if trace.steps.height:
        op_step = trace.ops.select("op_id", _op_step="step")
        k = k.join(op_step, on="op_id", how="left")
        k = k.filter(pl.col("step").is_not_null() | pl.col("_op_step").is_not_null())
        if step is not None:
            k = k.filter((pl.col("step") == step) | (pl.col("_op_step") == step))
    return int(k["dur"].sum()) if k.height else 0


def in_steps(trace: Trace) -> pl.Expr:
    """Rows (with a ``step`` column) whose time a step share may count: those
    inside a step when the trace has steps (work before the first or after
    the last step is not in the wall time the share is of), else all."""
    return pl.col("step").is_not_null() if trace.steps.height else pl.lit(True)


def time_basis(trace: Trace) -> str:
    """The total that ranks ops and makes their step share.

    Device time where the trace has GPU work; host time in a CPU-only
    trace, where device time is zero and the host is what the steps spend.
    """
    return time_basis_of(trace.kernels.height > 0)


def time_basis_of(gpu: bool) -> str:
    """:func:`time_basis` of a trace with (``gpu``) or without GPU work."""
    return "device_total_us" if gpu else "host_total_us"


def without_step_ranges(inst: pl.DataFrame) -> pl.DataFrame:
    """:func:`op_instances` rows without the ``ProfilerStep#N`` ranges, and the
    ops directly inside one made top-level.

    Older traces record the ranges as ops (``cpu_op``): they are the steps
    the shares are of, not ops, and as every op's top-level op they would
    take the whole step in module and source groupings.
    """
    step_range = pl.col("name").str.starts_with(STEP_PREFIX)
    in_step = pl.col("parent_id").is_in(inst.filter(step_range)["op_id"].implode())
    return inst.filter(~step_range).with_columns(
        top_op_id=pl.when(in_step).then(pl.col("op_id")).otherwise(pl.col("top_op_id"))
    )


def is_annotation() -> pl.Expr:
    """:func:`op_instances` rows that mark a span rather than do work:
    annotations, ``ProfilerStep#N``, ``nccl:*`` ranges, and the
    ``record_function`` ranges older traces record as ops, named
    ``what#where`` (``Optimizer.step#SGD.step``,
    ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``)."""
    name = pl.col("name")
    return (
        (pl.col("kind").cast(pl.String) != "op")
        | name.str.starts_with(STEP_PREFIX)
        | name.str.starts_with(NCCL_PREFIX)
        | name.str.contains(r"^[^:\s]+#")
    )


#: The column :func:`fold_annotations` adds: whether the row is counted (an op, not an annotation).
COUNTED = "_counted"


@dataclass(frozen=True)
class _Marks:
    """Per row of :func:`op_instances`: whether it is counted (an op, not an
    annotation), the row of its outermost counted ancestor-or-self, and of
    its nearest (null: none)."""

    counted: pl.Series
    top: pl.Series
    holder: pl.Series


@per_trace
def _marks(trace: Trace) -> _Marks:
    """:class:`_Marks` of the trace's op rows, found once: every op table
    (each grouping, the coverage check, the module tree) reads the same."""
    inst = op_instances(trace).select("kind", "name", "parent_id")
    counted = inst.select(~is_annotation()).to_series()
    return _Marks(counted, outermost_marked(inst["parent_id"], counted), nearest_marked(inst["parent_id"], counted))


def _marks_of(trace: Trace, inst: pl.DataFrame) -> _Marks:
    """:func:`_marks` for ``inst``, rows of ``op_instances(trace)`` (some of its columns)."""
    marks = _marks(trace)
    if marks.counted.len() != inst.height:
        raise ValueError("op rows that are not op_instances(trace)'s")
    return marks


def without_annotations(trace: Trace, inst: pl.DataFrame) -> pl.DataFrame:
    """:func:`fold_annotations` with the annotations' rows left out."""
    folded = fold_annotations(trace, inst)
    return folded.filter(COUNTED).drop(COUNTED)


def fold_annotations(trace: Trace, inst: pl.DataFrame) -> pl.DataFrame:
    """:func:`op_instances` of ``trace`` (all of its rows, in op_id order) with the rows of
    :func:`is_annotation` marked not counted (``COUNTED`` false; left in: a
    filter would copy every column, and a table groups the counted rows
    alone); each op's top-level op is its outermost ancestor
    that is an op, so a range around the work (a step, ``Optimizer.step#``)
    does not take its ops' time in module and source groupings.

    An annotation's own GPU time (the kernels launched directly inside it,
    as NCCL kernels are inside their ``nccl:*`` range) becomes its nearest
    enclosing op's self time: the op launched them through the range, and
    its total already holds them.  Annotations under no op keep theirs
    (:func:`unheld_rows`)."""
    marks = _marks_of(trace, inst)
    marked, top = marks.counted, marks.top
    # the holder's row: op ids number the rows, as the ancestry walks take them
    holder = marks.holder.fill_null(-1).to_numpy()
    folds = (~marked).to_numpy() & (holder >= 0)
    device_self, kernels = (_add_at(inst[c].to_numpy(), holder[folds], folds) for c in ("device_self", "kernels"))
    return inst.with_columns(
        top_op_id=pl.Series(top).cast(inst.schema["top_op_id"]),
        device_self=pl.Series(device_self).cast(inst.schema["device_self"]),
        kernels=pl.Series(kernels).cast(inst.schema["kernels"]),
        **{COUNTED: marked},
    )


def _add_at(values: np.ndarray, rows: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """``values`` with the ``taken`` ones added to ``rows`` (exact integers)."""
    out = values.astype(np.int64, copy=True)
    np.add.at(out, rows, values[taken])
    return out


#: The row of an op table holding the GPU time launched outside every op and annotation.
NOT_UNDER_OP = "(not under any op)"
#: The row the ``ProfilerStep#N`` ranges are merged into.
STEPS_ROW = f"{STEP_PREFIX}*"


def unheld_rows(
    trace: Trace, inst: pl.DataFrame, *, include_annotations: bool, own: tuple[int, int] | None = None
) -> pl.DataFrame:
    """Rows, in :func:`op_instances` form, for the GPU time no op holds, so
    an op table accounts for every kernel: each annotation under no op with
    kernels of its own (a graph replay's ``step[DECODE ...]``, whose kernels
    the replay launched), by its name (unless ``include_annotations``: then
    it is a row already), and the kernels launched outside any range as
    :data:`NOT_UNDER_OP`.  Only device time: their host time is no op's.
    ``own`` ([lo, hi) ns; ``inst`` then has ``ts``): only the annotations
    starting then and the kernels launched then."""
    rows = []
    if not include_annotations:
        marks = _marks_of(trace, inst)
        orphan = inst.filter(~marks.counted & marks.holder.is_null() & (pl.col("device_self") > 0))
        if own is not None:
            orphan = orphan.filter(starts_in(own))
        rows.append(orphan.select(
            "op_id", "step", "device_self", "kernels",
            name=pl.when(pl.col("name").str.starts_with(STEP_PREFIX)).then(pl.lit(STEPS_ROW)).otherwise(pl.col("name")),
        ))
    kernels = trace.kernels if own is None else trace.kernels.filter(owned_kernels(*own))
    loose = kernels.select("op_id", "step", "dur").filter(pl.col("op_id").is_null() & (pl.col("dur") > 0))
    if loose.height:
        rows.append(loose.group_by("step").agg(device_self=pl.col("dur").sum(), kernels=pl.len()).select(
            op_id=pl.lit(None), step="step", device_self="device_self", kernels="kernels", name=pl.lit(NOT_UNDER_OP),
        ))
    if not rows:
        return inst.clear()
    own = pl.col("device_self")
    extra = pl.concat(rows, how="vertical_relaxed").with_columns(device_total=own, top_op_id=pl.col("op_id"))
    extra = extra.with_columns(pl.lit(None).alias(c) for c in inst.columns if c not in extra.columns)
    return extra.select(inst.columns).cast(inst.schema)


#: The columns of :func:`op_instances` that the op tables read, besides their grouping keys.
_TABLE_COLUMNS = (
    "op_id", "parent_id", "top_op_id", "kind", "name", "step", "kernels", "direction", "shapes", "dtypes",
    "device_self", "device_total", "host_self", "host_total", "flops_self", "flops_total", "bytes_self", "bytes_total",
)  # fmt: skip


def _table_columns(inst: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``inst`` with the columns an op table reads, taken before anything
    filters it: a filter copies every column it keeps, and op_instances has
    every op column (call stacks, shapes as text) beside its figures."""
    return inst.select(c for c in inst.columns if c in _TABLE_COLUMNS or c in keys)


def kernel_coverage(trace: Trace, step: int | None = None) -> tuple[float, float]:
    """(microseconds of kernel time in the rows of the default op table,
    microseconds of kernel time a step share may count): the table should
    hold all of it; less means GPU time no row shows."""
    trace = without_earlier_iteration(trace)
    inst = _table_columns(op_instances(trace), [])
    held = pl.concat([without_annotations(trace, inst), unheld_rows(trace, inst, include_annotations=False)])
    if step is not None:
        held = held.filter(pl.col("step") == step)
    covered = held.filter(in_steps(trace))["device_self"].sum()
    return float(covered or 0) / 1000.0, stepped_gpu_ns(trace, step) / 1000.0


#: Figures of an op that include its nested ops': a module entry gives up its nested entries' share.
_NESTED_FIGURES = ("host_total", "device_total", "flops_total", "bytes_total")


def module_entries(trace: Trace, inst: pl.DataFrame) -> pl.DataFrame:
    """The op calls of ``inst`` (:func:`fold_annotations` rows: those not
    ``COUNTED`` are left out) a by-module table counts, each with what is its module's.

    A module's time is that of its top-level ops, plus ops nested in an op
    of an enclosing module but placed in a submodule of it (the model puts a
    ``torch.compile`` kernel in the submodule it fuses,
    :mod:`kinetolens.model.compiled_modules`); the enclosing op then gives up
    their total times, FLOPs and bytes, so nothing counts twice and the
    groups still add up to the top-level ops' figures.
    """
    counted = pl.col(COUNTED)
    top = inst.filter(counted & (pl.col("top_op_id") == pl.col("op_id")))
    ops = trace.ops.select("op_id", "parent_id", "module")
    if not ops.height or not ops["op_id"].equals(pl.int_range(ops.height, eager=True, dtype=pl.Int64), check_names=False):
        return top  # ancestry below walks rows as op ids
    kept = ops["op_id"].is_in(inst.select(pl.col("op_id").filter(counted)).to_series().implode())
    parent = ops["parent_id"].cast(pl.Int64)
    # each op's nearest ancestor counted here (annotations between are skipped)
    up = nearest_marked(parent, kept).gather(parent)
    deeper = ops["module"].str.starts_with(ops["module"].gather(up) + ".").fill_null(False)
    nested = kept & up.is_not_null() & deeper
    if not nested.any():
        return top
    is_top = ops["op_id"].is_in(top["op_id"].implode())
    entry = is_top | nested
    # the nearest entry strictly above each nested entry takes its figures off
    above = nearest_marked(parent, entry).gather(parent)
    moved = pl.DataFrame({"op_id": ops["op_id"], "above": above}).filter(nested)
    moved = moved.join(inst.select("op_id", *_NESTED_FIGURES), on="op_id", how="left")
    given = moved.group_by("above").agg(pl.col(c).fill_null(0).sum().alias(f"_{c}") for c in _NESTED_FIGURES)
    entries = ops["op_id"].filter(entry).implode()
    out = inst.filter(counted & pl.col("op_id").is_in(entries)).join(
        given.rename({"above": "op_id"}), on="op_id", how="left", maintain_order="left"
    )
    return out.with_columns(
        (pl.col(c) - pl.col(f"_{c}").fill_null(0)).cast(inst.schema[c]).alias(c) for c in _NESTED_FIGURES
    ).drop(*(f"_{c}" for c in _NESTED_FIGURES))


@per_trace
def op_stats(
    trace: Trace,
    *,
    by: str = "op",
    aggregate: str = "sum",
    include_annotations: bool = False,
    step: int | None = None,
    inclusive: bool = False,
) -> pl.DataFrame:
    """One row per group with calls and the four times in microseconds;
    ``step_share_pct`` is of :func:`rank_basis` (self time for op groupings
    unless ``inclusive``)."""
    if by not in GROUPINGS:
        raise ValueError(f"unknown grouping {by!r}; choose from {', '.join(GROUPINGS)}")
    if aggregate not in AGGREGATES:
        raise ValueError(f"unknown aggregate {aggregate!r}; choose from {', '.join(AGGREGATES)}")
    if by == "kernel":
        return kernel_table(kernel_groups(trace, step=step), aggregate, share_whole_ns(trace, step))
    # ops copied from the next iteration to name the previous one's tail are in no step: each op counts in its own
    trace = without_earlier_iteration(trace)
    groups = op_groups(trace, by=by, include_annotations=include_annotations, step=step, inclusive=inclusive)
    table = op_table(groups, by, aggregate, share_whole_ns(trace, step))
    return with_module_calls(table, trace, step) if by == "module" else table  # calls: times the module ran


#: The op-table times (microseconds) and the op_instances columns they are taken from (ns).
_TIMES = {
    "device_self_us": "device_self",
    "device_total_us": "device_total",
    "host_self_us": "host_self",
    "host_total_us": "host_total",
}


def op_groups(
    trace: Trace,
    *,
    by: str = "op",
    include_annotations: bool = False,
    step: int | None = None,
    inclusive: bool = False,
    own: tuple[int, int] | None = None,
    gpu: bool | None = None,
) -> pl.DataFrame:
    """The op groups of ``trace`` as a part that adds up (:mod:`~kinetolens.analysis.workload.op_groups`);
    ``gpu``: whether the whole trace has GPU work (default: whether ``trace`` has), which
    decides the ranking time (:func:`rank_basis`);
    ``own`` ([lo, hi) ns) keeps the ops that start then and the GPU work
    launched then (a window's own part of a trace read a step window at a
    time: :func:`~kinetolens.model.ownership.owned_kernels`)."""
    keys = GROUPINGS[by]
    inst = _table_columns(op_instances(trace), [*keys, "ts"] if own else keys)
    extra = (
        unheld_rows(trace, inst, include_annotations=include_annotations, own=own) if by in ("op", "op+shape") else None
    )
    inst = inst.with_columns(pl.lit(True).alias(COUNTED)) if include_annotations else fold_annotations(trace, inst)
    if own is not None:
        inst = inst.filter(starts_in(own))
    if extra is not None:
        inst = pl.concat([inst, extra.with_columns(pl.lit(True).alias(COUNTED))])
    if step is not None:
        inst = inst.filter(pl.col("step") == step)
    if by == "module":
        inst = module_entries(trace, inst)
    elif by == "source":
        # A line's time is that of its top-level ops, so nested ops are not
        # counted twice.
        inst = inst.filter(pl.col(COUNTED) & (pl.col("top_op_id") == pl.col("op_id")))
    gpu = trace.kernels.height > 0 if gpu is None else gpu
    basis = _TIMES[time_basis_of(gpu)]
    share_basis = _TIMES[rank_basis_of(gpu, by, inclusive=inclusive)]
    # a row's work covers the kernels its ranking time does: self work beside self time
    scope, basis = ("self", share_basis) if share_basis.endswith("_self") else ("total", basis)
    flops, moved = f"flops_{scope}", f"bytes_{scope}"
    # Rows not counted (annotations) are grouped apart and their groups dropped.
    return (
        inst.group_by([*keys, COUNTED])
        .agg(
            calls=pl.len(),
            *(e for out, src in _TIMES.items() for e in figure_parts(src, out)),
            *figure_parts(flops, "flops"),
            *figure_parts(moved, "bytes"),
            _work_ns=pl.col(basis).filter(pl.col(flops).is_not_null() | pl.col(moved).is_not_null()).sum(),
            _basis_ns=pl.col(share_basis).filter(in_steps(trace)).sum(),
            in_shapes=counts("shapes"),
            dtypes=counts("dtypes"),
            direction=counts("direction"),
        )
        .filter(COUNTED)
        .drop(COUNTED)
    )


def op_table(groups: pl.DataFrame, by: str, aggregate: str, share_whole: int) -> pl.DataFrame:
    """The op table (:func:`op_stats`) of merged op groups; shares of ``share_whole`` ns."""
    return groups.select(
        *GROUPINGS[by],
        pl.col("calls").cast(pl.UInt32),
        *((taken(out, aggregate) / 1000.0).alias(out) for out in _TIMES),
        taken("flops", aggregate).alias("flops"),
        taken("bytes", aggregate).alias("bytes"),
        *(show(label) for label, show in OP_LABELS.items()),
        *achieved("flops", "bytes"),
        step_share(share_whole),
    )


def kernel_groups(trace: Trace, *, step: int | None = None, own: tuple[int, int] | None = None) -> pl.DataFrame:
    """The kernel groups (by name) of ``trace`` as a part that adds up; ``own``
    keeps the GPU work launched in [lo, hi) ns (:func:`owned_kernels`)."""
    work = kernel_work(trace).select("kernel_id", "flops", work_bytes=pl.col("bytes"))  # not memcpy ``bytes``
    k = trace.kernels.join(work, on="kernel_id", how="left")
    if step is not None:
        k = k.filter(pl.col("step") == step)
    if own is not None:
        k = k.filter(owned_kernels(*own))
    return k.group_by("name").agg(
        calls=pl.len(),
        *figure_parts("dur", "dur"),
        op=counts("op", missing="(no op)"),
        *weighted("blocks_per_sm", "dur", "blocks_per_sm"),
        *weighted("occupancy", "dur", "occupancy"),
        *figure_parts("flops", "flops"),
        *figure_parts("work_bytes", "bytes"),
        _work_ns=pl.col("dur").filter(pl.col("flops").is_not_null() | pl.col("work_bytes").is_not_null()).sum(),
        # Kernels have only device time, even in a CPU-only trace (where the table is empty).
        _basis_ns=pl.col("dur").filter(in_steps(trace)).sum(),
    )


def kernel_table(groups: pl.DataFrame, aggregate: str, share_whole: int) -> pl.DataFrame:
    """The kernel table (:func:`op_stats` by kernel) of merged kernel groups; shares of ``share_whole`` ns."""
    device = taken("dur", aggregate) / 1000.0
    return groups.select(
        "name",
        pl.col("calls").cast(pl.UInt32),
        device.alias("device_self_us"),
        device.alias("device_total_us"),
        (taken("dur", "mean") / 1000.0).alias("mean_us"),
        (taken("dur", "max") / 1000.0).alias("max_us"),
        (taken("dur", "min") / 1000.0).alias("min_us"),
        listed("op"),
        weighted_of("blocks_per_sm"),
        weighted_of("occupancy"),
        taken("flops", aggregate).alias("flops"),
        taken("bytes", aggregate).alias("bytes"),
        *achieved("flops", "bytes"),
        step_share(share_whole),
    )


def order_and_filter(
    table: pl.DataFrame,
    *,
    order_by: str = "device_total_us",
    top: int | None = None,
    min_time_us: float | None = None,
    max_time_us: float | None = None,
    name_regex: str | None = None,
    time_column: str | None = None,
    aggregate: str = "sum",
) -> pl.DataFrame:
    """Sort (``+COL`` ascending, ``COL`` descending), filter, cut, and add
    ``cumulative`` (the running total of COL) where COL adds up over groups
    under ``aggregate`` (:func:`additive`: a running total of means or
    percents of roof would mean nothing)."""
    ascending = order_by.startswith("+")
    col = order_by.lstrip("+-")
    if col not in table.columns:
        raise ValueError(f"cannot order by {col!r}; columns: {', '.join(table.columns)}")
    time_col = time_column or (col if col in TIME_COLUMNS else "device_total_us")
    if min_time_us is not None:
        table = table.filter(pl.col(time_col) >= min_time_us)
    if max_time_us is not None:
        table = table.filter(pl.col(time_col) <= max_time_us)
    if name_regex:
        key = table.columns[0]
        table = table.filter(pl.col(key).cast(pl.String).str.contains(name_regex))
    # Ties in the key's order: a table's groups come in hash order, which changes from run to run.
    keys = [k for k in table.columns[: table.columns.index("calls")] if k != col] if "calls" in table.columns else []
    ties = [pl.col(k).cast(pl.String) for k in keys if table.schema[k] in (pl.String, pl.Categorical) or isinstance(table.schema[k], pl.Enum)]
    table = table.sort([pl.col(col), *ties], descending=[not ascending] + [False] * len(ties), nulls_last=True, maintain_order=True)
    if table.schema[col].is_numeric() and additive(col, aggregate):
        table = table.with_columns(cumulative=pl.col(col).cum_sum())
    if top is not None:
        table = table.head(top)
    return table
