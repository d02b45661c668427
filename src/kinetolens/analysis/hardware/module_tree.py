"""The nn.Module tree: forward and backward GPU time, FLOPs and roofline per module.

A module's path (``Qwen2Model_0.Qwen2DecoderLayer_3.Qwen2Attention_3``) is
the chain of module frames around the work, each a class name with its
instance suffix.  A kernel belongs to the innermost module of its op, so a
module's *self* time is that of its own kernels and its *total* time adds
its descendants': each kernel is in one node's self time, and the roots'
totals add up to the GPU time.  Kernels outside any module (optimizer,
data copies) are the root ``(no module)``.  In a trace without GPU kernels
the times are host (CPU) time instead, as ``ops`` ranks such a trace: each
op's self time in its innermost module.

FLOPs, ideal time and percent of roofline come from
:func:`kinetolens.analysis.hardware.roofline.roofline_by` (``by="module"``), summed
over the subtree; without a known GPU only FLOPs are known (from
:func:`kinetolens.analysis.workload.ops.op_stats`).  ``tflops_s`` is the subtree's
FLOPs over its total device time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from kinetolens.analysis.workload.modules import module_calls
from kinetolens.analysis.workload.op_groups import OP_LABELS, merged
from kinetolens.analysis.workload.op_times import op_instances
from kinetolens.analysis.workload.op_groupings import GROUPINGS
from kinetolens.analysis.workload.ops import in_steps, op_groups, op_stats, op_table, share_whole_ns, without_annotations
from kinetolens.analysis.hardware.roofline import beats_model, own_op_roofline, require_roofs, roofline_by
from kinetolens.errors import TraceError
from kinetolens.model.earlier_launches import without_earlier_iteration
from kinetolens.model.ownership import owned_kernels, starts_in
from kinetolens.model.trace import Trace
from kinetolens.registry.gpus import GpuSpec

NO_MODULE = "(no module)"
SEP = "."
_INSTANCE = re.compile(r"_\d+$")
#: Times of a node: forward, backward, forward recomputed in backward
#: (activation checkpointing: counted once, under the module it recomputes,
#: and in neither fwd nor bwd), and all (optimizer and other kernels included).
TIMES = (
    "fwd_self_us", "fwd_total_us", "bwd_self_us", "bwd_total_us", "recompute_self_us", "recompute_total_us",
    "self_us", "total_us",
)  # fmt: skip
#: Each module's own sums: times in integer ns (a trace read a step window at
#: a time adds its windows' exactly, so its tree is the whole read's to the last
#: digit shown), then the roofline's.
_SUMMED = ("fwd_ns", "bwd_ns", "recompute_ns", "all_ns", "stepped_ns", "flops", "ideal_us", "roofed_us")


def module_type(segment: str) -> str:
    """``Qwen2Attention_3`` -> ``Qwen2Attention``: the class, without the instance suffix."""
    return _INSTANCE.sub("", segment)


def _natural(path: str) -> tuple:
    """Sort key: siblings in instance order (``Layer_2`` before ``Layer_10``)."""
    return tuple((module_type(s), int(m.group(0)[1:]) if (m := _INSTANCE.search(s)) else -1) for s in path.split(SEP))


def _own(trace: Trace, spec: GpuSpec | None, step: int | None, roof: pl.DataFrame | None) -> pl.DataFrame:
    """Per module path: its own kernels' time by direction (its ops' host self
    time in a trace without kernels), FLOPs, ideal and roofed time."""
    return _with_work(_times(trace, step), _work(trace, spec, step, roof))


def _times(trace: Trace, step: int | None = None, own: tuple[int, int] | None = None, gpu: bool | None = None) -> pl.DataFrame:
    """Per module path its own time (ns) by direction: its kernels', or its
    ops' host self time in a trace without kernels (``gpu``: whether the
    whole trace has kernels, default ``trace``'s); ``own`` keeps a window's
    own rows (kernels launched then, ops starting then)."""
    if trace.kernels.height if gpu is None else gpu:
        k, dur = trace.kernels, pl.col("dur")
        k = k if own is None else k.filter(owned_kernels(*own))
    else:  # CPU only: the host is what the steps spend, as `ops` ranks them (time_basis)
        k, dur = without_annotations(trace, op_instances(trace)), pl.col("host_self")
        k = k if own is None else k.filter(starts_in(own))
    k = k if step is None else k.filter(pl.col("step") == step)
    direction = pl.col("direction").cast(pl.String)
    return k.group_by(path=pl.col("module").fill_null(NO_MODULE)).agg(
        fwd_ns=dur.filter(direction == "fprop").sum(),
        bwd_ns=dur.filter(direction == "bprop").sum(),
        recompute_ns=dur.filter(direction == "recompute").sum(),
        all_ns=dur.sum(),
        stepped_ns=dur.filter(in_steps(trace)).sum(),
    )


def _with_work(times: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    return times.join(work, on="path", how="full", coalesce=True).with_columns(pl.col(c).fill_null(0) for c in _SUMMED)


def _work(trace: Trace, spec: GpuSpec | None, step: int | None, roof: pl.DataFrame | None) -> pl.DataFrame:
    """FLOPs, ideal time and time with a known roof per module path, from the roofline."""
    if roof is None and spec is not None and trace.kernels.height:
        try:
            roof = roofline_by(trace, spec, by="module", step=step)
        except TraceError:
            roof = None
    if roof is not None:
        pct = pl.col("pct_of_roof")
        return roof.select(
            path=pl.col("module"),
            flops=pl.col("flops").cast(pl.Float64),
            ideal_us=pl.col("ideal_us"),
            roofed_us=pl.when(pct > 0).then(pl.col("ideal_us") * 100.0 / pct),
        )
    return _flops_only(op_stats(trace, by="module", step=step))


def _flops_only(stats: pl.DataFrame) -> pl.DataFrame:
    """Per module path its FLOPs alone (an op table by module): no roof known."""
    return stats.select(
        path=pl.col("module").fill_null(NO_MODULE),
        flops="flops",
        ideal_us=pl.lit(None, pl.Float64),
        roofed_us=pl.lit(None, pl.Float64),
    )


def module_tree(
    trace: Trace, spec: GpuSpec | None = None, *, step: int | None = None, roof: pl.DataFrame | None = None
) -> pl.DataFrame:
    """One row per module (and every module around one), parents before children.

    Columns: ``path, parent, depth, name, type, calls`` (forward calls,
    :func:`kinetolens.analysis.workload.modules.module_calls`; null where unknown), the :data:`TIMES` in
    microseconds, ``step_share_pct`` (the part of ``total_us`` inside the
    steps, of their wall time: the roots' shares sum to at most 100%), ``flops, tflops_s,
    ideal_us, pct_of_roof`` (null where unknown).  ``roof``: the trace's
    ``roofline_by(trace, spec, by="module", step=step)`` where the caller has it.
    """
    trace = without_earlier_iteration(trace)  # the previous iteration's tail is in no step: count each layer's own step
    return tree_of(_own(trace, spec, step, roof), share_whole_ns(trace, step), module_calls(trace, step))


def tree_of(own: pl.DataFrame, step_ns: int, calls: pl.DataFrame) -> pl.DataFrame:
    """:func:`module_tree` from each module's own sums (``path`` and
    :data:`_SUMMED`), what step shares are of (ns) and the forward calls per
    module (``module, calls``)."""
    with_ancestors = own.with_columns(
        segments=pl.col("path").str.split(SEP),
    ).with_columns(
        ancestor=pl.int_ranges(1, pl.col("segments").list.len() + 1)
    ).explode("ancestor").with_columns(
        ancestor=pl.col("segments").list.head(pl.col("ancestor")).list.join(SEP),
    )
    us = lambda ns: ns / 1000.0  # noqa: E731 - after the integer sums
    totals = with_ancestors.group_by("ancestor").agg(
        fwd_total_us=us(pl.col("fwd_ns").sum()),
        bwd_total_us=us(pl.col("bwd_ns").sum()),
        recompute_total_us=us(pl.col("recompute_ns").sum()),
        total_us=us(pl.col("all_ns").sum()),
        _stepped_ns=pl.col("stepped_ns").sum(),
        flops=pl.col("flops").sum(),
        ideal_us=pl.col("ideal_us").sum(),
        roofed_us=pl.col("roofed_us").sum(),
    ).rename({"ancestor": "path"})
    mine = own.select(
        "path", fwd_self_us=us(pl.col("fwd_ns")), bwd_self_us=us(pl.col("bwd_ns")),
        recompute_self_us=us(pl.col("recompute_ns")), self_us=us(pl.col("all_ns")),
    )  # fmt: skip
    tree = totals.join(mine, on="path", how="left").with_columns(pl.col(c).fill_null(0.0) for c in TIMES)
    segments = pl.col("path").str.split(SEP)
    tree = tree.with_columns(
        parent=pl.when(segments.list.len() > 1).then(segments.list.head(segments.list.len() - 1).list.join(SEP)),
        depth=(segments.list.len() - 1).cast(pl.Int64),
        name=segments.list.last(),
        step_share_pct=pl.col("_stepped_ns") / step_ns * 100.0 if step_ns else pl.lit(None, pl.Float64),
        tflops_s=pl.when((pl.col("total_us") > 0) & (pl.col("flops") > 0)).then(pl.col("flops") / pl.col("total_us") / 1e6),
        pct_of_roof=pl.when(pl.col("roofed_us") > 0).then(pl.col("ideal_us") / pl.col("roofed_us") * 100.0),
        ideal_us=pl.when(pl.col("roofed_us") > 0).then(pl.col("ideal_us")),
        flops=pl.when(pl.col("flops") > 0).then(pl.col("flops")),
    ).with_columns(type=pl.col("name").map_elements(module_type, return_dtype=pl.String))
    tree = tree.join(calls.select(path="module", calls=pl.col("calls").cast(pl.Int64)), on="path", how="left")
    order = sorted(tree["path"].to_list(), key=lambda p: (p == NO_MODULE, _natural(p)))
    rank = pl.DataFrame({"path": order, "_rank": range(len(order))})
    return tree.join(rank, on="path").sort("_rank").select(
        "path", "parent", "depth", "name", "type", "calls", *TIMES, "step_share_pct", "flops", "tflops_s", "ideal_us",
        "pct_of_roof", beats_model(), "roofed_us",
    )


@dataclass(frozen=True)
class ModulePart:
    """What one window of a trace read a step window at a time adds to the
    module tree: its own kernels (launched in it) and ops (starting in it)."""

    #: Per module path its own time by direction (:func:`_times`).
    times: pl.DataFrame
    #: Per module path ``flops, ideal_us, known_us`` (the ops' device time
    #: whose roof is known) and whether any is known; without a roof (no
    #: GPU spec), the op groups by module (merged as op tables are).
    work: pl.DataFrame
    #: Whether ``work`` is of the roofline (the GPU's spec has its ceilings).
    roofed: bool
    #: Forward calls per module (``module, calls``) starting in the window.
    calls: pl.DataFrame


def module_part(trace: Trace, spec: GpuSpec | None, own: tuple[int, int], gpu: bool) -> ModulePart:
    """``trace`` (a window) reduced to its own part of :func:`module_tree`:
    ``own`` ([lo, hi) ns) is the time it owns, ``gpu`` whether the whole trace has kernels."""
    trace = without_earlier_iteration(trace)
    times = _times(trace, own=own, gpu=gpu)
    calls = module_calls(trace, own=own)
    if gpu and _has_roofs(spec, trace):
        return ModulePart(times, _roof_part(trace, spec, own), True, calls)
    return ModulePart(times, op_groups(trace, by="module", own=own, gpu=gpu), False, calls)


def _has_roofs(spec: GpuSpec | None, trace: Trace) -> bool:
    """Whether ``spec`` gives a roofline (as the whole trace's tree asks :func:`roofline_by`)."""
    try:
        require_roofs(spec, trace)
    except TraceError:
        return False
    return True


def _roof_part(trace: Trace, spec: GpuSpec | None, own: tuple[int, int]) -> pl.DataFrame:
    """Per module path the FLOPs, ideal and roofed device time of the op calls starting in ``own``."""
    schema = {"path": pl.String, "flops": pl.Float64, "ideal_us": pl.Float64, "known_us": pl.Float64, "any_known": pl.Boolean}
    if trace.kernels.height == 0:
        return pl.DataFrame(schema=schema)
    ops = own_op_roofline(trace, spec, own)
    known = pl.col("ideal_us").is_not_null()
    return ops.group_by(path=pl.col("module").fill_null(NO_MODULE)).agg(
        flops=pl.col("flops").sum().cast(pl.Float64),
        ideal_us=pl.col("ideal_us").filter(known).sum(),
        known_us=pl.col("device_us").filter(known).sum(),
        any_known=known.any(),
    ).cast(schema)  # type: ignore[arg-type]


def merged_tree(parts: Sequence[ModulePart], step_ns: int) -> pl.DataFrame:
    """:func:`module_tree` of a trace read a step window at a time, from its
    windows' :func:`module_part`; step shares of ``step_ns``."""
    if not parts:
        raise ValueError("no windows")
    times = pl.concat([p.times for p in parts]).group_by("path").agg(pl.all().sum())
    if parts[0].roofed:
        w = pl.concat([p.work for p in parts]).group_by("path").agg(pl.col("flops", "ideal_us", "known_us").sum(), pl.col("any_known").any())
        # as roofline_by: ideal time where some call's roof is known; roofed where its % of roof is above 0
        work = w.select(
            "path", "flops",
            ideal_us=pl.when(pl.col("any_known")).then(pl.col("ideal_us")),
            roofed_us=pl.when((pl.col("ideal_us") > 0) & (pl.col("known_us") > 0) & pl.col("any_known")).then(pl.col("known_us")),
        )  # fmt: skip
    else:
        work = _flops_only(op_table(merged([p.work for p in parts], GROUPINGS["module"], list(OP_LABELS)), "module", "sum", 1))
    calls = pl.concat([p.calls for p in parts]).group_by("module").agg(pl.col("calls").sum())
    return tree_of(_with_work(times, work), step_ns, calls)


def by_depth(tree: pl.DataFrame, depth: int | None) -> pl.DataFrame:
    """The tree down to ``depth`` (0: the roots); all of it for None."""
    return tree if depth is None else tree.filter(pl.col("depth") <= depth)


def by_type(tree: pl.DataFrame) -> pl.DataFrame:
    """One row per module class (``Qwen2Attention``: count 24), repeated layers read as one.

    ``total_us`` and the direction totals are summed over the instances;
    ``mean_us``, ``min_us``, ``max_us`` are of one instance's total time;
    ``pct_of_roof`` is the summed ideal time over the summed time with a
    known roof.  Ordered by ``total_us``.  A class nested in itself would
    count the inner instances' time twice; its ``nested`` column says so.
    """
    paths = set(tree["path"].to_list())
    nested = {p for p in paths if any(module_type(s) == module_type(p.rsplit(SEP, 1)[-1]) for s in p.split(SEP)[:-1])}
    return (
        tree.with_columns(_nested=pl.col("path").is_in(list(nested)))
        .group_by("type")
        .agg(
            count=pl.len(),
            calls=pl.col("calls").sum(),
            total_us=pl.col("total_us").sum(),
            mean_us=pl.col("total_us").mean(),
            min_us=pl.col("total_us").min(),
            max_us=pl.col("total_us").max(),
            fwd_total_us=pl.col("fwd_total_us").sum(),
            bwd_total_us=pl.col("bwd_total_us").sum(),
            self_us=pl.col("self_us").sum(),
            step_share_pct=pl.col("step_share_pct").sum(),
            flops=pl.col("flops").sum(),
            _ideal=pl.col("ideal_us").sum(),
            _roofed=pl.col("roofed_us").filter(pl.col("ideal_us").is_not_null()).sum(),
            nested=pl.col("_nested").any(),
            depth=pl.col("depth").min(),
        )
        .with_columns(
            flops=pl.when(pl.col("flops") > 0).then(pl.col("flops")),
            tflops_s=pl.when((pl.col("total_us") > 0) & (pl.col("flops") > 0)).then(pl.col("flops") / pl.col("total_us") / 1e6),
            pct_of_roof=pl.when(pl.col("_roofed") > 0).then(pl.col("_ideal") / pl.col("_roofed") * 100.0),
        )
        .with_columns(beats_model())
        .drop("_ideal", "_roofed")
        .sort(["total_us", "type"], descending=[True, False])
    )
