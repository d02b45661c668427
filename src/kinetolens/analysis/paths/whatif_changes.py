"""What-if changes: the ``--change`` specs, and which edges of a step's graph each one scales.

``kernel:NAME=F``, ``op:NAME=F``, ``module:NAME=F``, ``category:C=F``,
``launch:F``, ``overlap:communication``, ``rank:N=median``
(:func:`parse_change`); :func:`change_mask` picks the edges of a graph
whose categories :mod:`kinetolens.analysis.paths.whatif` has joined.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import polars as pl

from kinetolens.analysis.paths.critical_path import BOUND_BY

#: Category names accepted besides :data:`BOUND_BY` (what people type).
CATEGORY_ALIASES = {
    "dataloader": "data_loading",
    "data": "data_loading",
    "launch": "launch_overhead",
    "compute": "gpu_compute",
    "memory": "gpu_memory",
    "comm": "communication",
    "gaps": "kernel_gap",
}
CHANGE_KINDS = ("kernel", "op", "module", "category", "launch", "overlap", "rank")
_TRAILING_INDEX = re.compile(r"_\d+$")


class BadChange(ValueError):
    """A ``--change`` spec that cannot be understood; the message says why."""


@dataclass(frozen=True)
class Change:
    """One change: ``kind`` (:data:`CHANGE_KINDS`), what it matches, and the factor on durations."""

    kind: str
    target: str | None
    factor: float | None
    spec: str
    #: ``kernel_ids``: the kernels (``kernel_id``) a program-made change scales.
    ids: tuple[int, ...] | None = None


def _factor(text: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadChange(f"{spec!r}: the factor {text!r} is not a number (e.g. 0.5 for twice as fast, 0 to remove)") from None
    if not math.isfinite(value) or value < 0:
        raise BadChange(f"{spec!r}: the factor must be a number >= 0, not {text}")
    return value


def parse_change(spec: str) -> Change:
    """``kernel:NAME=F``, ``op:NAME=F``, ``module:NAME=F``, ``category:C=F``,
    ``launch:F``, ``overlap:communication``, ``rank:N=median``."""
    kind, sep, rest = spec.partition(":")
    kind = kind.strip().lower()
    usage = "kernel:NAME=F, op:NAME=F, module:NAME=F, category:C=F, launch:F, overlap:communication or rank:N=median"
    if not sep or kind not in CHANGE_KINDS:
        raise BadChange(f"{spec!r} is not a change; use {usage}")
    rest = rest.strip()
    if kind == "launch":
        return Change("launch", None, _factor(rest, spec), spec)
    if kind == "overlap":
        if rest.lower() not in ("communication", "comm"):
            raise BadChange(f"{spec!r}: only overlap:communication is supported")
        return Change("overlap", "communication", 1.0, spec)
    target, eq, value = rest.rpartition("=")
    if not eq or not target:
        raise BadChange(f"{spec!r} needs NAME=FACTOR after '{kind}:', e.g. {kind}:{_example(kind)}")
    if kind == "rank":
        if value.strip().lower() != "median" or not target.strip().isdigit():
            raise BadChange(f"{spec!r}: the rank change is rank:N=median (N a rank number)")
        return Change("rank", target.strip(), None, spec)
    if kind == "category":
        name = CATEGORY_ALIASES.get(target.strip().lower(), target.strip().lower())
        if name not in BOUND_BY or name == "sync_wait":
            choices = ", ".join(b for b in BOUND_BY if b != "sync_wait")
            raise BadChange(f"{spec!r}: unknown category {target!r} (one of {choices}, or dataloader)")
        return Change("category", name, _factor(value, spec), spec)
    return Change(kind, target.strip(), _factor(value, spec), spec)


def _example(kind: str) -> str:
    return {"kernel": "gemm=0.5", "op": "aten::mm=0.5", "module": "encoder=0.7", "category": "dataloader=0", "rank": "3=median"}[kind]


def _inside(ev: pl.DataFrame, ranges: pl.DataFrame) -> pl.Series:
    """Per event: whether it lies within one of ``ranges`` (pid, tid, ts, end) on its
    thread; GPU activity counts where the call that launched it does."""
    cpu = ev.filter(pl.col("side") == "cpu")
    if ranges.height == 0:
        return pl.Series("inside", [False] * ev.height)
    # Nested ranges of one name merge into their outermost.
    r = (
        ranges.sort("pid", "tid", "ts")
        .with_columns(prev_end=pl.col("end").cum_max().shift(1).over("pid", "tid"))
        .with_columns(new=(pl.col("prev_end").is_null() | (pl.col("ts") > pl.col("prev_end"))).cast(pl.Int64).cum_sum().over("pid", "tid"))
        .group_by("pid", "tid", "new")
        .agg(r_ts=pl.col("ts").min(), r_end=pl.col("end").max())
        .drop("new")
        .sort("r_ts")
    )
    hit = (
        cpu.select("eid", "pid", "tid", "ts", "end", "launch_id")
        .sort("ts")
        .join_asof(r, left_on="ts", right_on="r_ts", by=["pid", "tid"], strategy="backward", check_sortedness=False)
        .with_columns(inside=pl.col("r_end").is_not_null() & (pl.col("end") <= pl.col("r_end")))
    )
    launched = hit.filter(pl.col("inside") & pl.col("launch_id").is_not_null()).select("launch_id")
    gpu = ev.filter(pl.col("side") == "gpu").select("eid", inside=pl.col("launch_id").is_in(launched["launch_id"].implode()))
    flags = pl.concat([hit.select("eid", "inside"), gpu])
    return ev.select("eid").join(flags, on="eid", how="left", maintain_order="left")["inside"].fill_null(False)


def _module_match(target: str) -> pl.Expr:
    """An event's module path names ``target``: a dotted prefix of it, or one
    of its components with or without the ``_N`` index kinetolens adds."""
    t = target.strip(".").lower()
    module = pl.col("module").fill_null("").str.to_lowercase()
    component = module.str.split(".").list.eval(
        (pl.element() == t) | (pl.element().str.replace(_TRAILING_INDEX.pattern, "") == t)
    ).list.any()
    return (module == t) | module.str.starts_with(t + ".") | component


def change_mask(e: pl.DataFrame, ev: pl.DataFrame, change: Change) -> pl.Series:
    """Edges (rows of ``e``, categories joined) whose weight ``change`` scales."""
    cpu_or_kernel = pl.col("type").is_in(["cpu", "kernel"])
    if change.kind == "kernel":
        needle = re.escape(change.target or "")
        return e.select((pl.col("type") == "kernel") & pl.col("name").str.contains(f"(?i){needle}").fill_null(False))[:, 0]
    if change.kind == "category":
        return e.select(pl.col("category") == change.target)[:, 0]
    if change.kind == "kernel_ids":
        return e.select((pl.col("type") == "kernel") & pl.col("kernel_id").is_in(list(change.ids or ())).fill_null(False))[:, 0]
    if change.kind == "op":
        ranges = ev.filter((pl.col("side") == "cpu") & (pl.col("name") == change.target)).select("pid", "tid", "ts", "end")
        inside = ev.select("eid").with_columns(inside=_inside(ev, ranges))
        return e.join(inside, on="eid", how="left", maintain_order="left").select(cpu_or_kernel & pl.col("inside").fill_null(False))[:, 0]
    if change.kind == "module":
        return e.select(cpu_or_kernel & _module_match(change.target or "").fill_null(False))[:, 0]
    if change.kind == "launch":
        launchers = e.filter(pl.col("type") == "launch").select((pl.col("src") // 2).alias("rt")).unique()["rt"]
        return e.select((pl.col("type") == "launch") | ((pl.col("type") == "cpu") & pl.col("eid").is_in(launchers.implode())))[:, 0]
    if change.kind == "overlap":
        # What waited for a collective to finish (a sync, a stream waiting on its event).
        ends = ev.filter((pl.col("side") == "gpu") & pl.col("comm").fill_null(False)).select(end=2 * pl.col("eid") + 1)["end"]
        return e.select((pl.col("type") == "sync") & pl.col("src").is_in(ends.implode()))[:, 0]
    raise BadChange(f"{change.spec!r} cannot be applied to one trace")
