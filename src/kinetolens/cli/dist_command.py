"""``kinetolens dist RUNDIR``: the distributed view of a run of one trace per rank."""

from __future__ import annotations

import click
import polars as pl

from kinetolens.analysis.distributed import (
    collective_stats,
    run_overview,
    step_spread,
    step_times,
)
from kinetolens.analysis.stragglers import straggler_findings, stragglers
from kinetolens.cli.render import emit, emit_json
from kinetolens.runs import summarize_run


@click.command(name="dist")
@click.argument("run_dir", metavar="RUNDIR")
@click.option(
    "--executor", default=None, metavar="SPEC",
    help="local, local:N, or dask://HOST:PORT (default: $DASK_SCHEDULER_ADDRESS if set, else a local process pool).",
)  # fmt: skip
@click.option(
    "--json", "json_", is_flag=True, help="Print every table as one JSON object."
)
@click.option(
    "--no-cache", is_flag=True, help="Neither read nor write the Parquet cache."
)
@click.option(
    "--cache-dir", default=None, metavar="DIR|URL",
    help="Where the per-rank Parquet caches go: a directory or an fsspec URL (default: $KINETOLENS_CACHE_DIR, else ~/.cache/kinetolens).",
)  # fmt: skip
def dist_command(
    run_dir: str, executor: str | None, json_: bool, no_cache: bool, cache_dir: str | None
) -> None:
    """Step time per rank, computation / communication overlap, collectives
    (synchronizing vs data transfer, bus bandwidth) and stragglers.

    RUNDIR is a directory or an fsspec URL (file://, s3://, gs://, ...)."""
    if no_cache and cache_dir is not None:
        raise click.UsageError("--no-cache and --cache-dir exclude each other")
    cache = False if no_cache else (cache_dir if cache_dir is not None else True)
    summaries = summarize_run(run_dir, executor, cache=cache)
    straggling = stragglers(summaries)
    tables = {
        "ranks": step_times(summaries),
        "steps": step_spread(summaries),
        "collectives": collective_stats(summaries),
        "stragglers": straggling,
    }
    findings = [f.to_dict() for f in straggler_findings(summaries, straggling)]
    overview = run_overview(summaries)
    if json_:
        emit_json(
            {
                "run": overview,
                **{k: v.to_dicts() for k, v in tables.items()},
                "recommendations": findings,
            }
        )
        return
    world = overview["world_size"]
    click.echo(
        f"{overview['ranks']} rank(s)" + (f" of world size {world}" if world else "")
        + (f", {overview['backend']}" if overview["backend"] else "")
    )  # fmt: skip
    titles = {
        "ranks": "per rank (ms per step)",
        "steps": "step time across ranks (ms)",
        "collectives": "collectives (per rank; busbw in GB/s, nccl-tests factors)",
        "stragglers": "arrival at collectives",
    }
    for name, frame in tables.items():
        if frame.height:
            emit(
                frame.with_columns(pl.col(pl.Float64).round(3)),
                "table",
                title=titles[name],
            )
    for f in findings:
        click.echo(f"straggler: {f['evidence']}")
