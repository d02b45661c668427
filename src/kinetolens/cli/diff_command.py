"""``kinetolens diff BASELINE EXPERIMENT``: what changed between two runs.

Each side is a trace file, a run directory (one trace per rank, as
``kinetolens.profile`` or torch-tb-profiler write them) or a logdir holding
exactly one run.  ``--fail-if-slower PCT`` turns the comparison into a CI
gate: exit status 1, with one line saying why, when the experiment's mean
step time is more than PCT percent above the baseline's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import polars as pl
from rich.console import Console
from rich.text import Text

from kinetolens.analysis.diff import (
    ENVIRONMENT,
    LEVEL_KEYS,
    LEVELS,
    RunDiff,
    compare,
    environment_warning,
)
from kinetolens.cli.checks import WIDTH
from kinetolens.cli.load_options import TraceLoading, trace_load_options
from kinetolens.registry.words import counted
from kinetolens.cli.render import console as render_console
from kinetolens.cli.render import emit, emit_json, print_pairs, print_table
from kinetolens.errors import TraceError
from kinetolens.logdir import one_run
from kinetolens.model.trace import Trace
from kinetolens.model.vocabulary import CATEGORY_WORDS
from kinetolens.registry.kernel_names import short_names

#: Rows shown in the terminal unless ``-t`` says otherwise.
DEFAULT_TOP = 20
#: Levels of the default terminal view after the step categories, and their rows.
DEFAULT_VIEW: tuple[str, ...] = ("op", "kernel")
DEFAULT_VIEW_TOP = 10
#: Table of ``--json``/``--csv``/``--tsv`` when no ``--level`` is given.
DEFAULT_LEVEL = "op"
#: Exit status of a gate that fails (bad input is 2, as everywhere).
EXIT_SLOWER = 1


def side_paths(path: str) -> list[Path]:
    """The trace files one side of the diff stands for."""
    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file or directory")
    if p.is_file():
        return [p]
    return [t.path for t in one_run(p)]


def _load_side(path: str, loading: TraceLoading) -> list[Trace]:
    return [loading.load(str(p)) for p in side_paths(path)]


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:,.3f} ms"


def _side_line(info: dict[str, Any]) -> str:
    steps = info["steps"]
    counted_steps = counted(sum(steps), "step") if info["has_steps"] else "no ProfilerStep ranges (whole trace as one step)"
    ranks = f" over {info['ranks']} traces" if info["ranks"] > 1 else ""
    return f"{_ms(info['mean_step_us'])} mean step ({counted_steps}{ranks})"


def environment_line(env: dict[str, Any]) -> str:
    """What both sides share, what differs and what a side does not record, for the summary table."""
    same = [f"{ENVIRONMENT[k]} {env['baseline'][k]}" for k in ENVIRONMENT if k not in env["differs"] + env["unknown"]]
    parts = [f"same {', '.join(same)}"] if same else []
    if env["differs"]:
        parts.append(f"different {', '.join(ENVIRONMENT[k] for k in env['differs'])}")
    if env["unknown"]:
        parts.append(f"not recorded: {', '.join(ENVIRONMENT[k] for k in env['unknown'])}")
    return "; ".join(parts)


def _print_lead(console: Console, diff: RunDiff) -> None:
    """What a reader needs first: the environment warning, the step-time change
    and the step-time categories that made it, largest change first."""
    s = diff.summary
    warning = environment_warning(s["environment"])
    if warning:
        console.print(Text(f"Warning: {warning}.", style="bold yellow"))
    if s["regression_pct"] is not None:
        delta = s["step_delta_us"]
        word = "slower" if delta > 0 else "faster"
        change = f"{delta / 1000:+,.3f} ms ({abs(s['regression_pct']):.1f}% {word})" if delta else "no change"
        base, exp = s["baseline"]["mean_step_us"], s["experiment"]["mean_step_us"]
        console.print(Text(f"Step time {base / 1000:,.3f} → {exp / 1000:,.3f} ms: {change}", style="bold"))
        big = s["largest_step_change"]
        if big is not None:
            console.print(Text(
                f"Largest change: {CATEGORY_WORDS[big['category']]} {big['delta_us'] / 1000:+,.3f} ms per step",
                style="bold",
            ))  # fmt: skip
    steps = diff.tables.get("step")
    if steps is None:
        return
    steps = steps.filter((pl.col("baseline_us") != 0) | (pl.col("experiment_us") != 0)).select(
        category=pl.col("category").replace(CATEGORY_WORDS),
        status="status", baseline_us="baseline_us", experiment_us="experiment_us", delta_us="delta_us",
        delta_pct="delta_pct",
    )  # fmt: skip
    print_table(
        steps, title="Step time by category, per step (largest change first)", headers=SHORT_HEADERS, out=console,
        same_time_unit=True,
    )


def _print_summary(console: Console, diff: RunDiff, baseline: str, experiment: str) -> None:
    s = diff.summary
    rows = [
        ("environment", environment_line(s["environment"])),
        ("baseline", f"{baseline}: {_side_line(s['baseline'])}"),
        ("experiment", f"{experiment}: {_side_line(s['experiment'])}"),
        ("time basis", f"{s['basis']} (self time per op)"),
    ]
    for level, counts in s["counts"].items():
        if level != "step" and any(counts.values()):  # a CPU run has no kernel rows
            rows.append((level, ", ".join(f"{n} {status}" for status, n in counts.items() if n)))
    print_pairs(rows, title="kinetolens diff", out=console)


def _print_explained(console: Console, diff: RunDiff) -> None:
    expl = diff.summary["explained_by"]
    if not expl or not expl["ops"]:
        return
    ops = pl.DataFrame(
        {
            "op": [r["name"] for r in expl["ops"]],
            "status": [r["status"] for r in expl["ops"]],
            "delta_us": [float(r["delta_us"]) for r in expl["ops"]],
            "share_pct": [r["share_pct"] for r in expl["ops"]],
        },
        schema={"op": pl.String, "status": pl.String, "delta_us": pl.Float64, "share_pct": pl.Float64},
    )
    caption = (
        f"explained {expl['explained_us'] / 1000:+,.3f} ms, unexplained {expl['unexplained_us'] / 1000:+,.3f} ms "
        f"(all ops net {expl['all_ops_net_us'] / 1000:+,.3f} ms)"
    )
    print_table(
        ops, title="Ops that explain the step-time change", caption=caption, out=console,
        headers={"share_pct": "% of step delta"},
    )


#: Terminal headers (the JSON/CSV keep the full column names).
SHORT_HEADERS = {
    "baseline_us": "base us",
    "experiment_us": "exp us",
    "delta_us": "delta us",
    "delta_pct": "delta %",
}
def _arrow(base: str, exp: str) -> pl.Expr:
    """``2 → 3``: a before/after pair in one narrow column."""
    fmt = [pl.col(c).round(2).cast(pl.String).str.replace(r"\.0$", "") for c in (base, exp)]
    return pl.concat_str([fmt[0], pl.lit(" → "), fmt[1]])


def _terminal_columns(level: str, table: pl.DataFrame) -> pl.DataFrame:
    keys = list(LEVEL_KEYS[level])
    if "baseline_instances" in table.columns:  # a layer added or removed: say so by the module
        changed = pl.col("baseline_instances") != pl.col("experiment_instances")
        instances = _arrow("baseline_instances", "experiment_instances")
        label = pl.concat_str([pl.col("module"), pl.lit(" ["), instances, pl.lit(" instances]")])
        table = table.with_columns(pl.when(changed).then(label).otherwise(pl.col("module")).alias("module"))
    cols: list[str | pl.Expr] = [*keys, "status", "baseline_us", "experiment_us", "delta_us", "delta_pct"]
    if "baseline_calls" in table.columns:
        cols.append(_arrow("baseline_calls", "experiment_calls").alias("calls"))
    shown = table.select(cols)
    if level == "kernel":  # whole signatures run to hundreds of characters; --json and --csv keep them
        shown = shown.with_columns(short_names(shown["name"]).alias("name"))
    return shown


def _print_table(console: Console, frame: pl.DataFrame, title: str) -> None:
    """Numbers never wrap; the name columns take the rest of the width, two lines at most."""
    print_table(frame, title=title, headers=SHORT_HEADERS, out=console, same_time_unit=True)


def _gate(diff: RunDiff, limit_pct: float) -> None:
    """Exit 1 with one line when the experiment regressed beyond ``limit_pct``."""
    s = diff.summary
    pct = s["regression_pct"]
    if pct is None:
        raise click.ClickException("--fail-if-slower: a side has no step time to compare")
    if pct > limit_pct:
        base, exp = s["baseline"]["mean_step_us"], s["experiment"]["mean_step_us"]
        click.echo(
            f"kinetolens: experiment mean step {_ms(exp)} is {pct:.1f}% slower than baseline {_ms(base)} "
            f"(limit {limit_pct:g}%)",
            err=True,
        )
        sys.exit(EXIT_SLOWER)


@click.command("diff")
@click.argument("baseline", type=str)
@click.argument("experiment", type=str)
@click.option(
    "-l", "--level", type=click.Choice(LEVELS), default=None,
    help="Table to show: step breakdown, module, op, op and shapes, kernel "
    f"(default: the top ops and kernels; {DEFAULT_LEVEL} for --json/--csv/--tsv).",
)
@click.option("-t", "--top", type=click.IntRange(min=1), default=None,
              help=f"Rows to show (terminal default {DEFAULT_TOP}, {DEFAULT_VIEW_TOP} per table without --level; "
              "JSON/CSV default all).")
@click.option("--json", "json_", is_flag=True, help="Summary and the level's table as JSON.")
@click.option("--csv", "csv_", is_flag=True, help="The level's table as CSV.")
@click.option("--tsv", is_flag=True, help="The level's table as TSV.")
@click.option("--fail-if-slower", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Exit 1 when the experiment's mean step time is more than PCT% above the baseline's.")
@click.option("--exact-names", is_flag=True, help="Match raw names (keep module instance numbers, hashes, step numbers).")
@click.option("-w", "--width", type=WIDTH, help="Terminal width for the tables.")
@trace_load_options()
def diff_command(
    baseline: str, experiment: str, level: str | None, top: int | None, json_: bool, csv_: bool, tsv: bool,
    fail_if_slower: float | None, exact_names: bool, width: int | None, loading: TraceLoading,
) -> None:
    """Compare EXPERIMENT with BASELINE per step: first the step-time
    categories that changed most (data loading, GPU kernels, CPU execution,
    ...), then ops and kernels with time and call deltas, what is new and
    gone, and the ops that explain the step-time change.

    Each side is a trace file, a run directory (its ranks are averaged) or a
    logdir with one run.  Times are per step, in the unit each table's
    header names (--json/--csv: microseconds)."""
    machine = json_ or csv_ or tsv
    levels = [level or DEFAULT_LEVEL] if machine else ["step", *([level] if level else DEFAULT_VIEW)]
    diff = compare(
        _load_side(baseline, loading),
        _load_side(experiment, loading),
        levels=list(dict.fromkeys(levels)),
        exact_names=exact_names,
    )
    if machine:
        shown_level = level or DEFAULT_LEVEL
        table = diff.tables[shown_level]
        if json_:
            rows = table.head(top) if top else table
            emit_json({"summary": diff.summary, "level": shown_level, "rows": rows.to_dicts()})
        else:
            warning = environment_warning(diff.summary["environment"])
            if warning:  # the table goes to stdout, so the warning to stderr
                click.echo(f"kinetolens: warning: {warning}", err=True)
            emit(table.head(top) if top else table, "csv" if csv_ else "tsv")
    else:
        console = render_console(width)
        _print_lead(console, diff)
        _print_summary(console, diff, baseline, experiment)
        _print_explained(console, diff)
        for shown_level in [level] if level else DEFAULT_VIEW:
            if level == "step":
                break  # the lead table is the step level
            table = diff.tables[shown_level]
            if table.height == 0:
                continue
            shown = _terminal_columns(shown_level, table).head(top or (DEFAULT_TOP if level else DEFAULT_VIEW_TOP))
            more = f" (top {shown.height} of {table.height} by |delta|)" if table.height > shown.height else ""
            _print_table(console, shown, f"{shown_level} per step{more}")
    if fail_if_slower is not None:
        _gate(diff, fail_if_slower)
