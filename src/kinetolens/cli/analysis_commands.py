"""``kinetolens kernels | ops``: the kernel and op tables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click
import polars as pl

from kinetolens.analysis.workload.annotations import annotation_stats
from kinetolens.analysis.hardware.kernels import DEFAULT_COLUMNS, KERNEL_COLUMNS, kernel_table
from kinetolens.analysis.workload.op_tree import collapse, op_tree
from kinetolens.analysis.workload.ops import (
    AGGREGATES,
    GROUPINGS,
    TIME_COLUMNS,
    default_order,
    default_order_of,
    kernel_coverage,
    op_stats,
    order_and_filter,
    rank_basis,
    rank_basis_of,
    share_whole_note,
    NOT_UNDER_OP,
)
from kinetolens.analysis.hardware.roofline import LOST_COLUMNS, with_time_lost
from kinetolens.cli.checks import (
    ROWS,
    WIDTH,
    check_step,
    check_time_range,
    no_kernels,
    regex,
    require_kernels,
)
from kinetolens.cli.load_options import TraceLoading, trace_load_options
from kinetolens.analysis.trace_kind import trace_kind
from kinetolens.cli.render import console as render_console
from kinetolens.cli.render import (
    Streamed,
    echo_notes,
    emit,
    pick_columns,
    print_fitted,
    terminal_width,
)
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.errors import TraceError
from kinetolens.model.trace import Trace
from kinetolens.registry.kernel_names import short_names
from kinetolens.views import empty_reasons, units

if TYPE_CHECKING:
    from kinetolens.runs.windowed_read import WindowedOps


def _format(csv: bool, tsv: bool, json_: bool) -> str:
    return "csv" if csv else "tsv" if tsv else "json" if json_ else "table"


class _ColumnHelp(click.Command):
    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_help(ctx, formatter)
        with formatter.section("Columns (-c)"):
            formatter.write_dl(list(KERNEL_COLUMNS.items()))


@click.command("kernels", cls=_ColumnHelp)
@click.argument("trace", type=str)
@click.option(
    "-c", "--columns", default=None,
    help="Comma-separated columns.  Default: those that fit the terminal (80, 120 or wider columns); "
    f"in --csv/--tsv/--json: {','.join(DEFAULT_COLUMNS)}.",
)
@click.option("--csv", is_flag=True, help="CSV output.")
@click.option("--tsv", is_flag=True, help="Tab-separated output.")
@click.option("--json", "json_", is_flag=True, help="JSON records.")
@click.option("-w", "--width", type=WIDTH, default=None, help="Terminal width for the table.")
@click.option("--step", type=int, default=None, help="Only kernels of this profiler step.")
@click.option("-n", "--limit", type=ROWS, default=None, help="At most this many rows.")
@click.option("--full-names", is_flag=True, help="Show kernels' whole recorded names, not their short form.")
@click.option(
    "--windows/--whole", "windows", default=None,
    help="Read the trace a step window at a time (memory bounded by a step; not with --step), or whole; "
    "default: a step window at a time from 1.5 GB of JSON.",
)
@trace_load_options(capture=True)
def kernels_command(
    trace: str, columns: str | None, csv: bool, tsv: bool, json_: bool, width: int | None, step: int | None,
    limit: int | None, full_names: bool, loading: TraceLoading, windows: bool | None = None,
) -> None:
    """One row per GPU kernel: layer, op, shapes, direction, time (PyProf's report).

    Kernel names are shown in a short form (no argument list, namespaces or
    template plumbing); --full-names shows them as recorded."""
    fmt = _format(csv, tsv, json_)
    if columns is None and fmt == "table":
        cols = pick_columns(KERNEL_COLUMNS, KERNEL_COLUMNS_BY_WIDTH, terminal_width(width))
    else:
        cols = [c.strip() for c in (columns or ",".join(DEFAULT_COLUMNS)).split(",") if c.strip()]
    if full_names and fmt == "table":
        cols = [c for c in dict.fromkeys("kernel" if c == "short_name" else c for c in cols)]
    unknown = [c for c in cols if c not in KERNEL_COLUMNS]
    if unknown:
        raise click.BadParameter(f"unknown column(s) {', '.join(unknown)}; choose from {', '.join(KERNEL_COLUMNS)}", param_hint="-c")
    headers = {"short_name": "kernel"} if "kernel" not in cols else None
    if _kernels_in_windows(trace, windows, step, cols, Streamed(fmt, limit), width, headers, loading):
        return
    loaded = loading.load(trace)
    require_kernels(trace, loaded)
    check_step(trace, loaded, step)
    table = kernel_table(loaded, step=step).select(cols)
    if limit is not None:
        table = table.head(limit)
    emit(table, fmt, width=width, headers=headers)


def _kernels_in_windows(
    trace: str, windows: bool | None, step: int | None, cols: list[str], out: Streamed, width: int | None,
    headers: dict[str, str] | None, loading: TraceLoading,
) -> bool:
    """Write the kernel table read a step window at a time where ``windows``
    asks for it (None: from the trace's size; never with ``step``); whether it did."""
    from kinetolens.runs.windowed_read import kernels_in_windows

    if windows is True and step is not None:
        raise click.BadParameter("a step window at a time reads every step's kernels; --step reads the trace whole", param_hint="--windows")
    if step is not None:
        return False
    read = loading.in_windows(trace, windows, lambda path, notes: kernels_in_windows(path, cols, out.write, notes=notes))
    if read is None:
        return False
    if out.rows == 0:
        raise TraceError(trace, no_kernels())
    out.finish(width, headers)
    echo_notes([read])
    return True


#: Default terminal columns of ``kinetolens kernels`` by terminal width (up to 80, up to 120, wider).
KERNEL_COLUMNS_BY_WIDTH = (
    (99, ["idx", "dir", "op", "short_name", "dur_us", "tc"]),
    (139, ["idx", "step", "dir", "module", "op", "short_name", "params", "dur_us", "tc", "stream"]),
    (1 << 30, [c for c in DEFAULT_COLUMNS if c != "kernel"]),
)


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


@click.command("ops")
@click.argument("trace", type=str)
@click.option("-t", "--top", type=ROWS, default=20, show_default=True, help="Show the top N rows.")
@click.option("--aggregate-by", "by", type=click.Choice(list(GROUPINGS)), default="op", show_default=True)
@click.option(
    "--aggregate", type=click.Choice(list(AGGREGATES)), default="sum", show_default=True,
    help="How each group's times, FLOPs and bytes are taken over its calls; count ranks by calls and keeps sums.",
)
@click.option(
    "--order-by",
    default=None,
    help="Column; prefix + for ascending.  Default: device_self_us (host_self_us for CPU-only traces; "
    "the total for module and source groupings; see --inclusive), or calls with --aggregate count.  "
    "lost_us: time lost to the roofline (needs a GPU in the spec table; see docs/roofline.md).",
)
@click.option(
    "--inclusive", is_flag=True,
    help="Rank ops by total time (their children's included) instead of self time; shares then overlap.",
)
@click.option("--tree", is_flag=True, help="Ops as a call tree: top-level ops, the ops they call, their kernels.")
@click.option(
    "--min-share", type=click.FloatRange(min=0.0), default=1.0, show_default=True,
    help="With --tree: fold nodes under this percent of the step into 'N more'.",
)
@click.option(
    "--annotations", is_flag=True,
    help="The annotations (ProfilerStep#N, record_function and nccl:* ranges) instead of the ops.",
)
@click.option("--min-time", type=float, default=None, help="Only rows with at least this time (us).")
@click.option("--max-time", type=float, default=None, help="Only rows with at most this time (us).")
@click.option("--name", "name_regex", default=None, callback=regex, help="Only rows whose key matches this regex.")
@click.option("--step", type=int, default=None, help="Only this profiler step.")
@click.option(
    "-c", "--columns", default=None,
    help="Comma-separated columns to show (default: all in --json/--csv; the main ones in the terminal).",
)
@click.option("--csv", is_flag=True)
@click.option("--json", "json_", is_flag=True)
@click.option("-w", "--width", type=WIDTH, default=None, help="Terminal width for the table.")
@click.option(
    "--windows/--whole", "windows", default=None,
    help="Read the trace a step window at a time (memory bounded by a step; op, op+shape and kernel "
    "tables without --step, --tree or --annotations), or whole; default: a step window at a time from "
    "1.5 GB of JSON where the table allows it.",
)
@trace_load_options(capture=True)
def ops_command(
    trace: str, top: int, by: str, aggregate: str, order_by: str | None, min_time: float | None, max_time: float | None,
    name_regex: str | None, step: int | None, columns: str | None, csv: bool, json_: bool, width: int | None,
    loading: TraceLoading, inclusive: bool = False, tree: bool = False, min_share: float = 1.0, annotations: bool = False,
    windows: bool | None = None,
) -> None:
    """Top ops by device/host time (MegEngine profile_analyze options).

    Where the trace's GPU has known peaks (op, op+shape, module and source
    groupings), lost_us is the group's total time lost to its roofline and
    pct_of_roof its percent of roof, as kinetolens roofline computes them;
    --order-by lost_us ranks ops by what they would save at 100% of it.

    Ops rank by self time (the GPU time of the kernels they launched
    themselves), so nested ops (aten::conv2d > ... > aten::cudnn_convolution)
    do not repeat the same work; --inclusive ranks by total time.
    """
    check_time_range(min_time, max_time)
    shown = _Shown(top, min_time, max_time, name_regex, columns, csv, json_, width)
    read = _ops_in_windows(trace, windows, by, aggregate, inclusive, windowless=step is not None or tree or annotations,
                           loading=loading)  # fmt: skip
    if read is not None:
        if order_by is not None and order_by.lstrip("+-") in LOST_COLUMNS:
            raise click.BadParameter(
                f"{order_by.lstrip('+-')} needs the trace read whole (--whole)", param_hint="--order-by"
            )
        order = order_by or default_order_of(read.gpu, by, aggregate, inclusive=inclusive)
        if read.table.height == 0 and not (csv or json_):
            raise TraceError(trace, f"no {'kernels' if by == 'kernel' else 'ops'} in the trace's steps")
        lost = "; the time lost to the roofline (lost_us) needs the trace read whole (--whole)"
        notes = [read.read + (lost if read.gpu and by != "kernel" else "")]
        _show_ops(read.table, shown, by=by, aggregate=aggregate, order_by=order,
                  time_column=default_order_of(read.gpu, by, "sum"),
                  basis=rank_basis_of(read.gpu, by, inclusive=inclusive), inclusive=inclusive, notes=notes)  # fmt: skip
        return
    loaded = loading.load(trace)
    check_step(trace, loaded, step)
    if tree or annotations:
        _ops_view(loaded, trace, tree=tree, min_share=min_share, top=top, step=step, json_=json_, csv=csv, width=width)
        return
    if order_by is None:
        order_by = default_order(loaded, by, aggregate, inclusive=inclusive)
    stats = op_stats(loaded, by=by, aggregate=aggregate, step=step, inclusive=inclusive)
    empty = None if csv or json_ else _why_no_rows(loaded, stats, by)  # machine formats: an empty list
    if empty:
        raise TraceError(trace, empty)
    spec = gpu_spec(loaded)
    if spec is not None and spec.dram_gbps:
        stats = with_time_lost(stats, loaded, spec, by, step=step, inclusive=inclusive)
    elif order_by.lstrip("+-") in LOST_COLUMNS:
        raise click.BadParameter(
            f"{order_by.lstrip('+-')} needs the GPU's peaks, and this trace's GPU is not in the spec table "
            "(kinetolens roofline --peak-tflops/--peak-gbps works without it)",
            param_hint="--order-by",
        )
    notes = []
    if by != "kernel" and (whole := share_whole_note(loaded, step)):
        notes.append(whole)
    if by in ("op", "op+shape") and loaded.kernels.height:
        covered_us, kernel_us = kernel_coverage(loaded, step)
        if kernel_us:
            notes.append(
                f"kernel time in the table: {covered_us / kernel_us * 100:.1f}% of the {kernel_us / 1000:,.3f} ms "
                "the steps' kernels ran (GPU time under an annotation is its op's, else the annotation's row)"
            )
    _show_ops(stats, shown, by=by, aggregate=aggregate, order_by=order_by,
              time_column=default_order(loaded, by, "sum"), basis=rank_basis(loaded, by, inclusive=inclusive),
              inclusive=inclusive, notes=notes)  # fmt: skip


@dataclass(frozen=True)
class _Shown:
    """How ``kinetolens ops`` shows its table: rows, filters, columns, format."""

    top: int
    min_time: float | None
    max_time: float | None
    name_regex: str | None
    columns: str | None
    csv: bool
    json_: bool
    width: int | None


def _ops_in_windows(
    trace: str, windows: bool | None, by: str, aggregate: str, inclusive: bool, *, windowless: bool, loading: TraceLoading
) -> WindowedOps | None:
    """The op table read a step window at a time where ``windows`` asks for it
    (None: from the trace's size, where the table can be), else None."""
    from kinetolens.runs.windowed_read import ops_in_windows

    can = by in ("op", "op+shape", "kernel") and not windowless
    if windows is True and not can:
        raise click.BadParameter(
            "a step window at a time reads op, op+shape and kernel tables, without --step, --tree or --annotations",
            param_hint="--windows",
        )
    if not can:
        return None
    return loading.in_windows(
        trace, windows, lambda path, notes: ops_in_windows(path, by=by, aggregate=aggregate, inclusive=inclusive, notes=notes)
    )


def _show_ops(
    stats: pl.DataFrame, shown: _Shown, *, by: str, aggregate: str, order_by: str, time_column: str, basis: str,
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
        emit(table, _format(shown.csv, False, shown.json_), title=title)
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


def _why_no_rows(loaded: Trace, stats: pl.DataFrame, by: str) -> str | None:
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


def _ops_view(
    loaded, trace: str, *, tree: bool, min_share: float, top: int, step: int | None, json_: bool, csv: bool,
    width: int | None,
) -> None:
    """``ops --tree`` and ``ops --annotations``."""
    if tree:
        full = op_tree(loaded, step=step)
        if full.height == 0 and not (json_ or csv):
            raise TraceError(trace, _why_no_rows(loaded, full, "op") or "no op in this step")
        if json_ or csv:
            emit(full, _format(csv, False, json_))
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
        emit(table, _format(csv, False, json_))
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
