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

    from kinetolens.model.trace import Trace

#: The load warnings about counters, shown on stderr (the summary shows every warning).
COUNTER_WARNINGS = ("Nsight Compute", "CUPTI counters")
#: Columns the terminal table shows; --csv/--json carry every counter too.
TERMINAL_COLUMNS = ["idx", "top_level_op", "bottom_level_op", "kernel", "flops", "tensor_flops", "dram_bytes", "tc"]


def _chosen(columns: str | None, default: list[str], available: list[str]) -> list[str]:
    """The terminal table's columns: ``-c``'s, each one known, else ``default``."""
    if not columns:
        return list(default)
    wanted = [c.strip() for c in columns.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in available]
    if unknown:
        raise click.BadParameter(f"unknown column(s) {', '.join(unknown)}; choose from {', '.join(available)}", param_hint="-c")
    return wanted


def _flat(table: pl.DataFrame) -> pl.DataFrame:
    """CSV cannot hold lists: the op stack becomes ``outer > ... > inner``."""
    import polars as pl

    return table.with_columns(pl.col("op_stack").list.join(" > "))


@click.command("counters")
@click.argument("trace", type=str)
@click.option("--csv", "csv_", is_flag=True, help="CSV output, every counter column.")
@click.option("--json", "json_", is_flag=True, help="JSON records, every counter column.")
@click.option(
    "--samples", is_flag=True, help="PM sampling: each sample (GPU, metric, start, end, value) instead of the kernels."
)
@click.option(
    "--by-op", is_flag=True,
    help="Per op name: the FLOPs and DRAM bytes kinetolens models from the shapes beside those its kernels' counters measured.",
)
@click.option("-n", "--limit", type=click.IntRange(min=1), help="At most this many rows.")
@click.option("-c", "--columns", default=None, help="Comma-separated columns of the terminal table.")
@click.option("-w", "--width", type=WIDTH, help="Terminal width for the table.")
@trace_load_options(ncu=True)
def counters_command(
    trace: str, csv_: bool, json_: bool, samples: bool, limit: int | None, width: int | None, loading: TraceLoading,
    columns: str | None = None, by_op: bool = False,
) -> None:
    """Hardware counters of each kernel in TRACE, with its op stack, FLOPs and DRAM bytes.

    Needs a trace recorded with CUPTI counters (kinetolens.profile(counters=[...])
    or torch.profiler's profiler_metrics), or --ncu: Nsight Compute's CSV of
    the same step, each of its kernels paired with TRACE's by name, grid and
    block.  Per kernel: FLOPs count the SASS add/mul/fma instructions (FMA =
    2), tensor_flops Nsight Compute's Tensor Core math; tc is yes/no from
    Tensor Core counters when recorded, else from the kernel name.  PM
    sampling (the GPU's counters every millisecond): each kernel name with the
    time-weighted mean of the samples its kernels overlap; --csv/--json give
    each kernel, --samples each sample.  --by-op: each op name's modeled FLOPs
    and bytes beside the measured ones, most excess DRAM bytes first.
    """
    # here, not at the top: the command's --help needs neither polars nor rich
    import polars as pl

    from kinetolens.analysis.hardware.counters import NoCounters, counter_table, kernels_profiled
    from kinetolens.analysis.hardware.pm_sampling import has_pm_samples
    from kinetolens.cli.render import console as render_console
    from kinetolens.cli.render import emit
    from kinetolens.registry.kernel_names import short_names
    from kinetolens.views import units

    t = loading.load(trace)
    for w in t.warnings:  # what the counters' reader and pairing left out, counted
        if w.kind.startswith(COUNTER_WARNINGS):
            click.echo(f"kinetolens: warning: {w}", err=True)
    if t.kernel_counters.height == 0 and has_pm_samples(t):
        _pm_sampling(t, trace, csv_=csv_, json_=json_, samples=samples, limit=limit, width=width, columns=columns)
        return
    if samples:
        raise TraceError(trace, "--samples is for CUPTI PM sampling, and this trace has none")
    try:
        table = counter_table(t)
    except NoCounters as exc:
        raise TraceError(trace, str(exc)) from None
    if by_op:
        _by_op(t, trace, csv_=csv_, json_=json_, limit=limit, width=width, columns=columns)
        return
    if limit is not None:
        table = table.head(limit)
    if json_:
        emit(table, "json")
        return
    if csv_:
        emit(_flat(table), "csv")
        return
    default = [c for c in TERMINAL_COLUMNS if c != "tensor_flops" or table[c].null_count() < table.height]
    shown = table.select(_chosen(columns, default, table.columns))
    shown = shown.with_columns(
        *([short_names(shown["kernel"]).alias("kernel")] if "kernel" in shown.columns else []),
        *(pl.col(c).cast(pl.Int64, strict=False) for c in ("flops", "tensor_flops", "dram_bytes") if c in shown.columns),
    )
    emit(shown, "table", title=f"kinetolens counters: {trace}", width=width)
    pairing = table["pairing"][0] if table.height else "-"
    if loading.ncu is not None:
        profiled, kernels = kernels_profiled(t)
        pairing = f"{pairing} ({profiled} of the trace's {counted(kernels, 'kernel')} profiled by Nsight Compute)"
    total = table["flops"].sum() if table["flops"].null_count() < table.height else None
    dram = table["dram_bytes"].sum() if table["dram_bytes"].null_count() < table.height else None
    tensor = table["tensor_flops"].sum() if table["tensor_flops"].null_count() < table.height else None
    render_console(width).print(
        f"{counted(table.height, 'kernel')}; op stacks: {pairing}; "
        f"CUDA-core FLOPs {'-' if total is None else units.flops(total)}; "
        + ("" if tensor is None else f"Tensor Core FLOPs {units.flops(tensor)}; ")
        + f"DRAM bytes {'-' if dram is None else units.traffic(dram)}",
        markup=False,
        highlight=False,
    )


#: Columns of the --by-op terminal table; --csv/--json carry kernels and excess_bytes too.
BY_OP_COLUMNS = ["op", "flops", "measured_flops", "flops_ratio", "bytes", "measured_bytes", "bytes_ratio", "calls"]


def _by_op(
    t: Trace, trace: str, *, csv_: bool, json_: bool, limit: int | None, width: int | None, columns: str | None
) -> None:
    """Modeled beside measured work per op name (``measured_vs_modeled``)."""
    from kinetolens.analysis.hardware.counters import measured_vs_modeled
    from kinetolens.cli.render import console as render_console
    from kinetolens.cli.render import emit

    table = measured_vs_modeled(t)
    if limit is not None:
        table = table.head(limit)
    if json_ or csv_:
        emit(table, "json" if json_ else "csv")
        return
    if table.height == 0:
        render_console(width).print(
            "no profiled kernel belongs to an op with modeled work (ops without recorded shapes have none, "
            "and counters unpaired with launches have no op)",
            markup=False, highlight=False,
        )
        return
    shown = table.select(_chosen(columns, BY_OP_COLUMNS, table.columns))
    emit(shown, "table", title=f"kinetolens counters: {trace} (by op, modeled and measured)", width=width)
    render_console(width).print(
        f"{counted(table.height, 'op')} with modeled work and profiled kernels, most excess DRAM bytes first; "
        "modeled: from each call's shapes; measured: its kernels' counters (Tensor Core math where counted); "
        "ratio: measured / modeled",
        markup=False,
        highlight=False,
    )


def _pm_sampling(
    t: Trace, trace: str, *, csv_: bool, json_: bool, samples: bool, limit: int | None, width: int | None,
    columns: str | None,
) -> None:
    """The PM-sampling view: kernel names (terminal), kernels (--csv/--json) or samples (--samples)."""
    from kinetolens.analysis.hardware.pm_sampling import pm_by_kernel_name, pm_per_kernel, pm_samples, sample_info
    from kinetolens.cli.render import console as render_console
    from kinetolens.cli.render import emit, print_table
    from kinetolens.registry.kernel_names import short_names
    from kinetolens.views import units

    every = pm_samples(t)
    fmt = "json" if json_ else "csv" if csv_ else "table"
    if samples:
        emit(every if limit is None else every.head(limit), fmt, title=f"kinetolens counters: {trace} (PM samples)", width=width)
        return
    per_kernel = pm_per_kernel(t)
    if fmt != "table":
        emit(per_kernel if limit is None else per_kernel.head(limit), fmt)
        return
    by_name = pm_by_kernel_name(per_kernel)
    if limit is not None:
        by_name = by_name.head(limit)
    shown = by_name.with_columns(short_names(by_name["name"]).alias("name")).rename({"name": "kernel"})
    shown = shown.select(_chosen(columns, shown.columns, shown.columns))
    # CUPTI metric names read as they are spelled, on two lines (unit__counter.rollup)
    metric_headers = {c: c.replace("__", "__\n", 1) for c in shown.columns if "__" in c}
    print_table(
        shown,
        title=f"kinetolens counters: {trace} (CUPTI PM sampling)",
        width=width,
        headers={"covered_pct": "sampled %", **metric_headers},
        droppable=["time_us", "covered_pct", "kernels"],  # before any metric (last named first), where the width is short
    )
    info = sample_info(every)
    gpus = ("GPUs " if len(info.devices) > 1 else "GPU ") + ", ".join("?" if d is None else str(d) for d in info.devices)
    every_text = "-" if info.interval_ns is None else units.duration(info.interval_ns / 1e3)
    render_console(width).print(
        f"CUPTI PM sampling on {gpus}: {counted(len(info.metrics), 'metric')}, "
        f"{counted(info.samples, 'sample')} every {every_text} over {units.duration(info.span_ns / 1e3)}. "
        "A kernel's value is the mean of the samples it overlaps, weighted by the overlap: the GPU's "
        "over each interval, shared by kernels that ran together.",
        markup=False,
        highlight=False,
    )
