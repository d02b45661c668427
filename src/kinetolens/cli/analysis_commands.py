"""``kinetolens kernels | ops``: the kernel and op tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kinetolens.analysis.hardware.kernel_columns import DEFAULT_COLUMNS, KERNEL_COLUMNS
from kinetolens.analysis.workload.op_groupings import AGGREGATES, GROUPINGS
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
from kinetolens.errors import TraceError

if TYPE_CHECKING:
    from kinetolens.cli.render import Streamed
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
    # here, not at the top: the command's --help needs neither polars nor rich
    from kinetolens.analysis.hardware.kernels import kernel_table
    from kinetolens.cli.render import Streamed, emit, pick_columns, terminal_width

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
    from kinetolens.cli.render import echo_notes
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
    # here, not at the top: the command's --help needs neither polars nor rich
    from kinetolens.analysis.hardware.gpu_spec import gpu_spec
    from kinetolens.analysis.hardware.roofline import LOST_COLUMNS, with_time_lost
    from kinetolens.analysis.workload.ops import (
        default_order,
        default_order_of,
        kernel_coverage,
        op_stats,
        rank_basis,
        rank_basis_of,
        share_whole_note,
    )
    from kinetolens.cli.ops_output import Shown, ops_view, show_ops, why_no_rows

    check_time_range(min_time, max_time)
    shown = Shown(top, min_time, max_time, name_regex, columns, csv, json_, width)
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
        show_ops(read.table, shown, by=by, aggregate=aggregate, order_by=order,
                 time_column=default_order_of(read.gpu, by, "sum"),
                 basis=rank_basis_of(read.gpu, by, inclusive=inclusive), inclusive=inclusive, notes=notes)  # fmt: skip
        return
    loaded = loading.load(trace)
    check_step(trace, loaded, step)
    if tree or annotations:
        ops_view(loaded, trace, tree=tree, min_share=min_share, top=top, step=step, json_=json_, csv=csv, width=width)
        return
    if order_by is None:
        order_by = default_order(loaded, by, aggregate, inclusive=inclusive)
    stats = op_stats(loaded, by=by, aggregate=aggregate, step=step, inclusive=inclusive)
    empty = None if csv or json_ else why_no_rows(loaded, stats, by)  # machine formats: an empty list
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
    show_ops(stats, shown, by=by, aggregate=aggregate, order_by=order_by,
             time_column=default_order(loaded, by, "sum"), basis=rank_basis(loaded, by, inclusive=inclusive),
             inclusive=inclusive, notes=notes)  # fmt: skip


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
