"""``kinetolens critical-path``: what bounds each step, along its longest dependency path."""

from __future__ import annotations

import click

from kinetolens.cli.checks import ROWS, WIDTH
from kinetolens.cli.load_options import TraceLoading, strict_option, trace_load_options


@click.command()
@click.argument("trace", metavar="TRACE|RUNDIR")
@click.option("--step", type=int, default=None, help="Only this profiler step (default: every complete step).")
@click.option("--annotation", default=None, help="Window: a host range whose name contains this text (HTA's rule).")
@click.option("--instance", type=click.IntRange(min=0), default=0, show_default=True, help="Which match of --annotation, from 0.")
@click.option("-t", "--top", type=ROWS, default=10, show_default=True, help="Rows of the top tables.")
@click.option("--json", "json_", is_flag=True, help="Every table as JSON, the path's edges in order included.")
@click.option("-w", "--width", type=WIDTH, default=None, help="Terminal width (default: the terminal's).")
@click.option("--perfetto", "perfetto", type=click.Path(dir_okay=False), default=None, help="Also write the annotated trace with a critical-path track (.json or .json.gz) for ui.perfetto.dev.")
@click.option("--keep-last-step", is_flag=True, help="Keep a last step the profiler cut short.")
@click.option(
    "--windows/--whole", "windows", default=None,
    help="Read the trace a step window at a time (memory bounded by a step): the path of --step, else of "
    "up to 8 whole steps in the middle; or whole. Default: a step window at a time from 1.5 GB of JSON.",
)
@trace_load_options()
@strict_option
@click.option(
    "--executor", default=None, metavar="SPEC",
    help="RUNDIR: local, local:N, or dask://HOST:PORT (default: $DASK_SCHEDULER_ADDRESS if set, else a local process pool).",
)  # fmt: skip
def critical_path_command(
    trace: str,
    step: int | None,
    annotation: str | None,
    instance: int,
    top: int,
    json_: bool,
    width: int | None,
    perfetto: str | None,
    keep_last_step: bool,
    loading: TraceLoading,
    strict: bool,
    executor: str | None,
    windows: bool | None = None,
) -> None:
    """The longest dependency path through each step and what bounds it.

    The path runs through CPU ops (nested), kernel launches, kernels and
    copies on each stream, and stream/event/device synchronizations; its
    length is split by what bounds each stretch (CPU, launch overhead,
    kernel gaps, GPU compute, memcpy/memset, communication, data loading).
    Time between top-level ops that nothing traced covers is not on it
    (span - length).

    RUNDIR (a directory of one trace per rank, or an fsspec URL): the path
    across ranks, each rank's step joined to the others' at its collectives;
    per step, which rank and which of its work gates it.
    """
    if is_run_dir(trace):
        if annotation is not None or perfetto is not None or keep_last_step:
            raise click.UsageError("with a RUNDIR, use --step (no --annotation, --perfetto or --keep-last-step)")
        from kinetolens.cli.cross_rank_view import show_run

        show_run(trace, step, top, json_, width, executor, loading.cache, strict)
        return
    if executor is not None:
        raise click.UsageError("--executor is for a RUNDIR of several ranks' traces")
    if step is not None and annotation is not None:
        raise click.UsageError("use --step or --annotation, not both")
    if instance and annotation is None:
        raise click.UsageError("--instance picks a match of --annotation, which is missing")
    from kinetolens.cli.critical_path_output import show_trace  # polars and rich: only when it runs

    if windows and (annotation is not None or keep_last_step or perfetto is not None):
        raise click.UsageError(
            "--windows reads whole steps: use --step, not --annotation, --keep-last-step or --perfetto"
        )
    show_trace(trace, step, annotation, instance, top, json_, width, perfetto, keep_last_step, loading, windows)


def is_run_dir(path: str) -> bool:
    """A directory (or a URL): the traces of a run's ranks."""
    from pathlib import Path

    from kinetolens.cache import is_url

    if is_url(path):
        return not path.rstrip("/").endswith((".json", ".json.gz", ".sqlite"))
    return Path(path).is_dir()
