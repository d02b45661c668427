"""``kinetolens dist RUNDIR``: the distributed view of a run of one trace per rank."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kinetolens.cli.load_options import TraceLoading, strict_option, trace_load_options

if TYPE_CHECKING:
    import polars as pl


@click.command(name="dist")
@click.argument("run_dir", metavar="RUNDIR")
@click.option(
    "--executor", default=None, metavar="SPEC",
    help="local, local:N, or dask://HOST:PORT (default: $DASK_SCHEDULER_ADDRESS if set, else a local process pool).",
)  # fmt: skip
@click.option(
    "--json", "json_", is_flag=True, help="Print every table as one JSON object."
)
@trace_load_options()
@strict_option
@click.option(
    "--cache-dir", default=None, metavar="DIR|URL",
    help="Where the per-rank caches go: a directory or an fsspec URL (default: $KINETOLENS_CACHE_DIR, else ~/.cache/kinetolens).",
)  # fmt: skip
@click.option(
    "--windows/--whole", "windows", default=None,
    help="Read each rank's trace a step window at a time (memory bounded by a step; not cached), or whole; "
    "default: a step window at a time from 1.5 GB of JSON.",
)
def dist_command(
    run_dir: str, executor: str | None, json_: bool, loading: TraceLoading, strict: bool, cache_dir: str | None,
    windows: bool | None = None,
) -> None:
    """Step time per rank, computation / communication overlap, collectives
    (synchronizing vs data transfer, bus bandwidth) and stragglers.

    RUNDIR is a directory or an fsspec URL (file://, s3://, gs://, ...)."""
    # Here, not at the top: `kinetolens dist -h` needs none of them.
    import polars as pl
    from rich.padding import Padding
    from rich.text import Text

    from kinetolens.analysis.ranks.dist_report import dist_report
    from kinetolens.cli.render import console as render_console
    from kinetolens.cli.render import echo_notes, emit_json, print_table
    from kinetolens.registry.words import counted
    from kinetolens.runs import summarize_run

    if not loading.cache and cache_dir is not None:
        raise click.UsageError("--no-cache and --cache-dir exclude each other")
    cache = cache_dir if loading.cache and cache_dir is not None else loading.cache
    notes: list[str] = []
    summaries = summarize_run(run_dir, executor, cache=cache, notes=notes, strict=strict, windows=windows)
    report = dist_report(summaries)
    echo_notes([*notes, *report.notes])
    if json_:
        emit_json(report.to_json())
        return
    overview = report.overview
    console = render_console()  # the shared width rule: the terminal's, full width when piped
    world = overview["world_size"]
    console.print(
        f"{overview['ranks']} rank{'' if overview['ranks'] == 1 else 's'}" + (f" of world size {world}" if world else "")
        + (f", {overview['backend']}" if overview["backend"] else ""),
        highlight=False,
    )  # fmt: skip
    groups = report.dimensions
    several = groups.height > 0 and groups.height > groups["dimension"].n_unique()  # a dimension of several groups
    for name, frame in report.tables().items():
        if not frame.height or (name == "dimension_totals" and not several):
            continue
        shown, caption = _table(name, frame), None
        if name == "dimension_totals":
            # each dimension's evidence once, with how many groups share it
            bases = groups.group_by("dimension", "basis", maintain_order=True).len()
            caption = "\n".join(
                f"{d}: " + "; ".join(f"{counted(n, 'group')}, {basis}" for _, basis, n in part.iter_rows())
                for (d,), part in bases.group_by("dimension", maintain_order=True)
            )  # fmt: skip
        if name == "dimensions":
            if groups.height > MAX_GROUP_ROWS:
                console.print(Text(f"{counted(groups.height, 'process group')}: each group's row is in --json"))
                console.line()
                continue
            # each dimension's evidence in words under the table (a cut column would not
            # read), once for the groups it places alike
            caption = "\n".join(
                f"{d} {', '.join(part['group'])}: {basis}"
                for (d, basis), part in shown.group_by("dimension", "basis", maintain_order=True)
            )  # fmt: skip
            shown = shown.drop("basis")
        if name in LONG_TABLES and shown.height > MAX_ROWS:
            key, what = LONG_TABLES[name]
            total = shown.height
            if key is not None:
                shown = shown.sort(pl.col(key).abs() if key == "offset_ms" else pl.col(key), descending=True, nulls_last=True)
            shown = shown.head(MAX_ROWS)
            cut = f"{MAX_ROWS} of {total:,} rows shown{f' ({what})' if what else ''}; --json has every row"
            caption = f"{caption}\n{cut}" if caption else cut
        droppable = [c for c in DROPPABLE.get(name, ()) if c in shown.columns]
        print_table(shown, title=TITLES[name], caption=caption, headers=HEADERS, out=console, droppable=droppable)
    for f in report.findings:
        console.print(Text(f"straggler: {f.title}", style="bold"))
        console.print(Padding(Text(f.evidence), (0, 0, 0, 2), expand=False))
        console.print(Padding(Text(f"change: {f.change}"), (0, 0, 0, 2), expand=False))


#: Process groups listed one a row in the terminal; more are in --json only.
MAX_GROUP_ROWS = 12
#: Rows of a per-rank or per-group table the terminal shows on a large run (the rest: --json).
MAX_ROWS = 16
#: Those tables, with the column their shown rows are the largest of (None: as ordered) and why, in words.
LONG_TABLES = {
    "ranks": ("step_ms", "the slowest steps first"),
    "clocks": ("offset_ms", "the largest offsets first"),
    "stragglers": (None, "the latest first"),
    "skew": (None, None),
    "collectives": (None, None),
}

#: Terminal titles and column headers (the JSON keeps the column names).
TITLES = {
    "ranks": "per rank (ms per step)",
    "steps": "step time across ranks (ms)",
    "pipeline": "pipeline stages (ms per step; bubble: time no compute op of the stage runs)",
    "dimension_totals": "parallel dimensions, their groups together (per rank: ms over the trace; exposed: ms per step not hidden by compute)",
    "dimensions": "parallel dimensions (per rank: ms over the trace; exposed: ms per step not hidden by compute)",
    "collectives": "collectives (per rank: ms over the trace, bandwidth in GB/s as nccl-tests)",
    "skew": "transfer vs arrival skew (us per call, aligned clocks)",
    "clocks": "clock offsets from the reference rank (from matched collective ends)",
    "stragglers": "arrival at collectives (late: ms after the earliest rank, per step)",
}
HEADERS = {
    "step_ms": "step", "max_step_ms": "max step", "compute_ms": "compute", "comm_ms": "comm",
    "overlap_ms": "overlap", "other_ms": "other", "exposed_comm_ms": "exposed\ncomm",
    "min_ms": "min", "mean_ms": "mean", "max_ms": "max", "slowest_rank": "slowest\nrank",
    "spread_ms": "spread", "time_ms": "time", "sync_ms": "sync", "transfer_ms": "transfer",
    "algbw_gbps": "algbw", "busbw_gbps": "busbw", "untimed_calls": "calls\nuntimed",
    "late_ms": "late", "last_share": "last at\n% calls", "caused_share": "% of all\nwaiting",
    "cost_ms_per_step": "others wait\nms/step", "late_z": "late z", "differs_most": "differs most",
    "excess_ms": "by ms\n/step",
    "group_desc": "description", "group_ranks": "group ranks", "comm_ms_per_step": "in flight\nms/step",
    "exposed_ms": "exposed\nms/step", "step_share": "% of\nstep", "transfer_us": "transfer",
    "arrival_skew_us": "arrival\nskew", "launch_skew_us": "launch\nskew", "late_rank_calls": "calls held\nby a late rank",
    "bound_by": "bound by", "bubble_ms": "bubble", "bubble_pct": "bubble\n%",
    "ideal_bubble_pct": "ideal\nbubble %", "microbatches": "micro-\nbatches", "offset_ms": "offset ms", "spread_us": "± us", "arrival_ms": "arrival\nms",
}  # fmt: skip
SHARES = ("last_share", "caused_share")
#: Columns left out first where the terminal is narrow (last named first): a
#: dimension's exposed time and share of the step, a stage's bubble against its
#: ideal are what those tables are for.
DIMENSION_DROPPABLE = ("bytes", "time_ms", "transfer_ms", "sync_ms", "algbw_gbps", "busbw_gbps")
DROPPABLE = {"dimension_totals": DIMENSION_DROPPABLE, "dimensions": DIMENSION_DROPPABLE,
             "pipeline": ("compute_ms", "steps")}  # fmt: skip


def _table(name: str, frame: pl.DataFrame) -> pl.DataFrame:
    """One analysis table for the terminal: shares in percent, the cause
    category as a user names it, empty columns left out; printed through
    :func:`kinetolens.cli.render.print_table` (numbers whole, bytes with units)."""
    import polars as pl

    from kinetolens.analysis.ranks.stragglers import CAUSES

    if name == "dimension_totals":
        frame = frame.with_columns(pl.col("step_share") * 100)
    if name == "dimensions":
        frame = frame.with_columns(pl.col("step_share") * 100, pl.col("group").replace("", "(default)"))
        frame = frame.drop([c for c in ("group_desc", "group_ranks") if frame[c].is_null().all()])
    if name == "skew":
        frame = frame.with_columns(pl.col("group").replace("", "(default)"))
    if name == "collectives" and not (frame["untimed_calls"].fill_null(0) > 0).any():
        frame = frame.drop("untimed_calls")
    if name == "stragglers":
        frame = frame.with_columns(
            pl.col(*SHARES) * 100,
            pl.col("differs_most").replace_strict(CAUSES, default=None),
            pl.when(pl.col("straggler")).then(pl.lit("yes")).otherwise(pl.lit("")).alias("straggler"),
        )
        if frame["late_z"].is_null().all():
            frame = frame.drop("late_z")
        frame = frame.select("rank", "straggler", pl.exclude("rank", "straggler"))  # the verdict fits 80 columns
    return frame
