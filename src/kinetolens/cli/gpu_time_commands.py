"""``kinetolens idle | launches``: where the GPU timeline idles, and what launching costs."""

from __future__ import annotations

import click

from kinetolens.analysis.gputime.thresholds import KERNEL_WAIT_US, SHORT_LAUNCH_US
from kinetolens.cli.checks import MICROSECONDS
from kinetolens.cli.load_options import TraceLoading, trace_load_options
from kinetolens.errors import TraceError

#: Rows of the short-kernel table shown in the terminal.
SHORT_ROWS = 15


_keep_last_step = click.option(
    "--keep-last-step", is_flag=True,
    help="Keep the last ProfilerStep even when the profiler cut it short (by default such a step is dropped).",
)
_windows = click.option(
    "--windows/--whole", "windows", default=None,
    help="Read the trace a step window at a time (memory bounded by a step and the GPU work's own columns), or whole; "
    "default: a step window at a time from 1.5 GB of JSON.",
)
_json = click.option("--json", "json_", is_flag=True, help="All tables as one JSON object (see docs/idle.md).")
_csv = click.option("--csv", is_flag=True, help="All tables as CSV, each after a '# name' line.")


@click.command("idle")
@click.argument("trace", type=str)
@_json
@_csv
@click.option("--kernel-wait-us", type=MICROSECONDS, default=KERNEL_WAIT_US, show_default=True,
              help="Gaps shorter than this between queued work count as launch overhead (kernel_wait).")
@_keep_last_step
@_windows
@trace_load_options()
def idle_command(
    trace: str, json_: bool, csv: bool, kernel_wait_us: float, keep_last_step: bool, loading: TraceLoading,
    windows: bool | None = None,
) -> None:
    """GPU busy / idle time, kernel types and their overlap, and why each stream idles."""
    # here, not at the top: the command's --help needs neither polars nor the analyses
    from kinetolens.analysis.gputime.gpu_streams import rank_of
    from kinetolens.analysis.gputime.idle import idle_tables, idle_work
    from kinetolens.cli.gpu_time_output import NO_GPU_WORK, emit_tables, gpu_trace, gpu_work_in_windows, idle_part

    read = gpu_work_in_windows(trace, windows, keep_last_step, loading, idle_part)
    if read is not None:
        if not read.gpu:
            raise TraceError(trace, NO_GPU_WORK)
        work, rank = read.work, read.rank
    else:
        t = gpu_trace(trace, loading, keep_last_step)
        work, rank = idle_work(t), rank_of(t)
    emit_tables(idle_tables(work, rank, kernel_wait_us), json_, csv, compact=True)
    if read is not None and not (json_ or csv):
        click.echo(read.read)


@click.command("launches")
@click.argument("trace", type=str)
@_json
@_csv
@click.option("--short-us", type=MICROSECONDS, default=SHORT_LAUNCH_US, show_default=True,
              help="Short kernels: those running shorter than a launch call of at most this many µs.")
@_keep_last_step
@_windows
@trace_load_options()
def launches_command(
    trace: str, json_: bool, csv: bool, short_us: float, keep_last_step: bool, loading: TraceLoading,
    windows: bool | None = None,
) -> None:
    """Launch cost and delay per launch call, launch-bound kernels, graph launches, queue depth, copy bandwidth."""
    # here, not at the top: the command's --help needs neither polars nor the analyses
    from kinetolens.analysis.gputime.launch import launch_tables, launch_work, launch_work_part
    from kinetolens.cli.gpu_time_output import NO_GPU_WORK, emit_tables, gpu_trace, gpu_work_in_windows

    read = gpu_work_in_windows(trace, windows, keep_last_step, loading, launch_work_part)
    if read is not None:
        if not read.gpu:
            raise TraceError(trace, NO_GPU_WORK)
        work = read.work
    else:
        work = launch_work(gpu_trace(trace, loading, keep_last_step))
    tables = launch_tables(work, short_us)
    if not (json_ or csv):
        tables["short_kernels"] = tables["short_kernels"].head(SHORT_ROWS)
    emit_tables(tables, json_, csv, optional=("multi_kernel_launches",), compact=True)
    if read is not None and not (json_ or csv):
        click.echo(read.read)
