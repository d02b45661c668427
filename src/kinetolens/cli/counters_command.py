"""``kinetolens counters``: CUPTI counters per kernel with the ops that launched it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kinetolens.cli.checks import WIDTH
from kinetolens.cli.load_options import TraceLoading, trace_load_options
from kinetolens.errors import TraceError
from kinetolens.registry.words import counted

if TYPE_CHECKING:
    import polars as pl

#: Columns the terminal table shows; --csv/--json carry every counter too.
TERMINAL_COLUMNS = ["idx", "top_level_op", "bottom_level_op", "kernel", "flops", "dram_bytes", "tc"]


def _flat(table: pl.DataFrame) -> pl.DataFrame:
    """CSV cannot hold lists: the op stack becomes ``outer > ... > inner``."""
    import polars as pl

    return table.with_columns(pl.col("op_stack").list.join(" > "))


@click.command("counters")
@click.argument("trace", type=str)
@click.option("--csv", "csv_", is_flag=True, help="CSV output, every counter column.")
@click.option("--json", "json_", is_flag=True, help="JSON records, every counter column.")
@click.option("-n", "--limit", type=click.IntRange(min=1), help="At most this many rows.")
@click.option("-w", "--width", type=WIDTH, help="Terminal width for the table.")
@trace_load_options()
def counters_command(
    trace: str, csv_: bool, json_: bool, limit: int | None, width: int | None, loading: TraceLoading
) -> None:
    """CUPTI counters of each kernel in TRACE, with its op stack, FLOPs and DRAM bytes.

    Needs a trace recorded with per-kernel CUPTI range profiling
    (kinetolens.profile(counters=[...]) or torch.profiler's profiler_metrics).
    FLOPs count the SASS add/mul/fma instructions (FMA = 2); tc is yes/no from
    Tensor Core instruction counters when recorded, else from the kernel name.
    """
    # here, not at the top: the command's --help needs neither polars nor rich
    import polars as pl

    from kinetolens.analysis.hardware.counters import NoCounters, counter_table
    from kinetolens.cli.render import console as render_console
    from kinetolens.cli.render import emit
    from kinetolens.registry.kernel_names import short_names
    from kinetolens.views import units

    t = loading.load(trace)
    try:
        table = counter_table(t)
    except NoCounters as exc:
        raise TraceError(trace, str(exc)) from None
    if limit is not None:
        table = table.head(limit)
    if json_:
        emit(table, "json")
        return
    if csv_:
        emit(_flat(table), "csv")
        return
    shown = table.select(TERMINAL_COLUMNS).with_columns(
        short_names(table["kernel"]).alias("kernel"), pl.col("flops", "dram_bytes").cast(pl.Int64, strict=False)
    )
    emit(shown, "table", title=f"kinetolens counters: {trace}", width=width)
    pairing = table["pairing"][0] if table.height else "-"
    total = table["flops"].sum() if table["flops"].null_count() < table.height else None
    dram = table["dram_bytes"].sum() if table["dram_bytes"].null_count() < table.height else None
    render_console(width).print(
        f"{counted(table.height, 'kernel')}; op stacks: {pairing}; "
        f"CUDA-core FLOPs {'-' if total is None else units.flops(total)}; "
        f"DRAM bytes {'-' if dram is None else units.traffic(dram)}",
        markup=False,
        highlight=False,
    )
