"""The terminal and machine views of ``kinetolens ops``: the op table ranked,
filtered and fitted to the terminal, the op call tree and the annotations
(the command itself is :mod:`kinetolens.cli.analysis_commands`)."""

from __future__ import annotations

from dataclasses import dataclass

import click
import polars as pl

from kinetolens.analysis.hardware.roofline import LOST_COLUMNS
from kinetolens.analysis.trace_kind import trace_kind
from kinetolens.analysis.workload.annotations import annotation_stats
from kinetolens.analysis.workload.op_groupings import GROUPINGS
from kinetolens.analysis.workload.op_tree import collapse, op_tree
from kinetolens.analysis.workload.ops import NOT_UNDER_OP, TIME_COLUMNS, order_and_filter, share_whole_note
from kinetolens.cli.render import console as render_console
from kinetolens.cli.render import emit, print_fitted
from kinetolens.errors import TraceError
from kinetolens.model.trace import Trace
from kinetolens.registry.kernel_names import short_names
from kinetolens.views import empty_reasons, units


#: Terminal headers of the ops table (-c, --json and --csv keep the full names).
OPS_HEADERS = {
    "device_total_us": "device\ntotal us",
    "device_self_us": "device\nself us",
    "host_total_us": "host\ntotal us",
    "host_self_us": "host\nself us",
    "step_share_pct": "%\nstep",
    "tflops_s": "TFLOP\n/s",
    "gbps": "GB/s",
    "pct_of_roof": "%\nroof",
    "lost_us": "lost\nus",
    "mean_us": "mean\nus",
    "occupancy": "occup.",
    "blocks_per_sm": "blocks\n/SM",
}


def ops_terminal_columns(table: pl.DataFrame, by: str, basis: str) -> list[str]:
    """What ``kinetolens ops`` shows in the terminal without -c: the key, calls,
    times (the ranking one first), step share, achieved rates and roofline,
    and the calls' direction; shapes, dtypes, FLOPs and bytes are in -c,
    --json and --csv."""
    if by == "kernel":
        wanted = ["name", "calls", "device_total_us", "mean_us", "step_share_pct", "tflops_s", "gbps", "occupancy", "op"]
    else:
        side = "host_self_us" if basis.endswith("_self_us") else "host_total_us"
        pair = basis.replace("_self_", "_total_") if basis.endswith("_self_us") else basis.replace("_total_", "_self_")
        times = [basis, pair, side] if basis.startswith("device") else [basis, pair]
        wanted = [*GROUPINGS[by], "calls", *times, "step_share_pct", "tflops_s", "gbps", *LOST_COLUMNS, "direction"]
    return [c for c in dict.fromkeys(wanted) if c in table.columns]


#: Terminal columns dropped first (last named first) where the width is short.
OPS_DROPPABLE = (
    "pct_of_roof", "tflops_s", "step_share_pct", "device_total_us", "device_self_us", "lost_us", "mean_us",
    "host_self_us", "host_total_us", "gbps", "occupancy", "shapes", "op", "direction",
)  # fmt: skip


def _print_ops(frame: pl.DataFrame, keys: list[str], title: str, caption: str, width: int | None) -> list[str]:
    """Numbers never wrap; the key folds onto two lines at most; columns that do not fit are left out."""
    key = keys[0] if keys[0] in frame.columns else frame.columns[0]
    droppable = [c for c in OPS_DROPPABLE if c in frame.columns and c != key and c != frame.columns[1]]
    return print_fitted(frame, key=key, title=title, caption=caption, width=width, headers=OPS_HEADERS, droppable=droppable)


@dataclass(frozen=True)
class Shown:
    """How ``kinetolens ops`` shows its table: rows, filters, columns, format."""

    top: int
    min_time: float | None
    max_time: float | None
    name_regex: str | None
    columns: str | None
    csv: bool
    json_: bool
    width: int | None


def show_ops(
    stats: pl.DataFrame, shown: Shown, *, by: str, aggregate: str, order_by: str, time_column: str, basis: str,
    inclusive: bool, notes: list[str],
) -> None:
    """Rank, filter and print an op table (``stats``, as op_stats gives it), with ``notes`` under it."""
    try:
        table = order_and_filter(
            stats, order_by=order_by, top=shown.top, min_time_us=shown.min_time, max_time_us=shown.max_time,
            name_regex=shown.name_regex, time_column=None if order_by.lstrip("+-") in TIME_COLUMNS else time_column,
            aggregate=aggregate,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--order-by") from None
    if shown.columns:
        wanted = [c.strip() for c in shown.columns.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in table.columns]
        if unknown:
            raise click.BadParameter(
                f"unknown column(s) {', '.join(unknown)}; choose from {', '.join(table.columns)}", param_hint="-c"
            )
        table = table.select(wanted)
    title = _ops_title(shown.top, order_by, by, aggregate)
    if shown.csv or shown.json_:
        emit(table, "csv" if shown.csv else "json", title=title)
        return
    lines = []
    if aggregate not in ("sum", "count"):
        lines.append(f"times, FLOPs, bytes: {aggregate} per call; % step, TFLOP/s, GB/s, lost us: of their sum")
    if not shown.columns:
        keep = ops_terminal_columns(table, by, basis)
        lines.append(f"more columns with -c: {', '.join(c for c in table.columns if c not in keep)}")
        table = table.select(keep)
    if by == "kernel" and "name" in table.columns:  # templated kernel names run to hundreds of characters
        table = table.with_columns(short_names(pl.Series(table["name"])).alias("name"))
    if by in ("op", "op+shape") and not inclusive and aggregate != "count":
        lines.append("ranked by self time: each op's own kernels, so nested ops do not repeat them (--inclusive: total)")
    _print_ops(table, GROUPINGS[by], title, "\n".join([*lines, *notes]), shown.width)


def _ops_title(top: int, order_by: str, by: str, aggregate: str) -> str:
    """``top 10 ops by GPU self time`` (``lowest``, ``mean``, ``calls`` as they apply), in words."""
    column = order_by.lstrip("+-")
    words = {"calls": "calls", "lost_us": "time lost to the roofline"}.get(column, units.basis_words(column).replace("_", " "))
    what = {"op": "ops", "op+shape": "ops by shape", "module": "modules", "source": "call sites", "kernel": "kernels"}[by]
    how = "" if aggregate in ("sum", "count") or column == "calls" else f" ({aggregate} per call)"
    return f"{'bottom' if order_by.startswith('+') else 'top'} {top} {what} by {words}{how}"


def why_no_rows(loaded: Trace, stats: pl.DataFrame, by: str) -> str | None:
    """Why an ops table would show nothing (or only the '-' group), in one line; None when it has rows."""
    key = GROUPINGS[by][0]
    # the "(not under any op)" row alone (every kernel, no op at all) is no table either
    shown = pl.col(key).is_not_null() & ~pl.col(key).cast(pl.String).is_in(["-", NOT_UNDER_OP])
    if key in stats.columns and stats.filter(shown).height:
        return None
    kind = trace_kind(loaded)
    if by == "kernel":
        return empty_reasons.no_kernels(kind)
    if loaded.ops.height == 0:
        return empty_reasons.no_ops(kind, nsys=loaded.format.startswith("nsys"))
    if by == "module":
        return empty_reasons.no_modules(kind)
    if by == "source":
        return empty_reasons.no_sources(kind)
    return "no op in this step" if stats.height == 0 else None


def ops_view(
    loaded, trace: str, *, tree: bool, min_share: float, top: int, step: int | None, json_: bool, csv: bool,
    width: int | None,
) -> None:
    """``ops --tree`` and ``ops --annotations``."""
    if tree:
        full = op_tree(loaded, step=step)
        if full.height == 0 and not (json_ or csv):
            raise TraceError(trace, why_no_rows(loaded, full, "op") or "no op in this step")
        if json_ or csv:
            emit(full, "csv" if csv else "json")
            return
        shown = collapse(full, min_share)
        if shown.filter(pl.col("kind") != "more").height == 0:
            render_console(width).print(
                f"every op is under {min_share:g}% of the step (--min-share 0 shows them all)", markup=False, highlight=False
            )
            return
        top_level = shown.filter(pl.col("depth") == 0)
        if top_level.height > top:
            shown = shown.filter(pl.col("path").is_in(_subtrees(shown, top_level["path"].head(top).to_list())))
        short = short_names(shown["name"])
        names = pl.when(pl.col("kind") == "kernel").then(short).otherwise(pl.col("name"))
        frame = shown.select(
            op=pl.concat_str(pl.lit("  ").repeat_by(pl.col("depth")).list.join(""), names),
            calls="calls", device_total_us="device_total_us", device_self_us="device_self_us",
            host_total_us="host_total_us", step_share_pct="step_share_pct",
        )  # fmt: skip
        caption = (
            "% step: a node's device total (its kernels and its children's) of the steps' time; the flat table's "
            f"% step is of self time\nnodes under {min_share:g}% of the step folded into 'N more' (--min-share); "
            "kernels shortened"
        )
        if loaded.kernels.height == 0:  # a CPU trace: device columns would be all zero
            frame = frame.drop("device_total_us", "device_self_us")
            caption = f"no GPU kernels: host time only; nodes under {min_share:g}% of the step folded into 'N more' (--min-share)"
        if whole := share_whole_note(loaded, step):
            caption += f"\n{whole}"
        print_fitted(
            frame, key="op", title=f"op call tree (top {top} top-level ops)", caption=caption, width=width,
            headers=OPS_HEADERS, droppable=[c for c in ("step_share_pct", "device_self_us", "host_total_us") if c in frame.columns],
            same_time_unit=True,
        )
        return
    table = annotation_stats(loaded, step=step).head(top)
    if table.height == 0 and not (json_ or csv):
        raise TraceError(trace, empty_reasons.NO_ANNOTATIONS)
    if json_ or csv:
        emit(table, "csv" if csv else "json")
        return
    caption = "self: not inside a nested annotation; % step is of the self time, so the shares sum to at most 100%"
    print_fitted(
        table, key="name", title=f"annotations (top {top})", caption=caption, width=width, headers=OPS_HEADERS,
        droppable=["step_share_pct", "device_self_us", "host_total_us"],
    )


def _subtrees(tree: pl.DataFrame, roots: list[str]) -> list[str]:
    """Paths of ``tree`` under (or at) one of ``roots``."""
    keep = set(roots)
    for path, parent in tree.select("path", "parent").iter_rows():
        if parent in keep:
            keep.add(path)
    return list(keep)
