"""``kinetolens diff BASELINE EXPERIMENT``: what changed between two runs.

Each side is a trace file, a run directory (one trace per rank, as
``kinetolens.profile`` or torch-tb-profiler write them) or a logdir holding
exactly one run.  ``--fail-if-slower PCT`` turns the comparison into a CI
gate: exit status 1, with one line saying why, when the experiment's mean
step time is more than PCT percent above the baseline's.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

import click
import polars as pl
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kinetolens.analysis.diff import (
    ENVIRONMENT,
    LEVEL_KEYS,
    LEVELS,
    STEP_LABELS,
    RunDiff,
    compare,
    environment_warning,
)
from kinetolens.cli.checks import WIDTH
from kinetolens.cli.render import emit, emit_json
from kinetolens.errors import TraceError
from kinetolens.loader import load
from kinetolens.logdir import one_run
from kinetolens.model.trace import Trace

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


def _load_side(path: str, cache: bool) -> list[Trace]:
    return [load(p, cache=cache) for p in side_paths(path)]


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:,.3f} ms"


def _side_line(info: dict[str, Any]) -> str:
    steps = info["steps"]
    counted = f"{sum(steps)} steps" if info["has_steps"] else "no ProfilerStep ranges (whole trace as one step)"
    ranks = f" over {info['ranks']} traces" if info["ranks"] > 1 else ""
    return f"{_ms(info['mean_step_us'])} mean step ({counted}{ranks})"


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
        word = "slower" if s["step_delta_us"] > 0 else "faster"
        base, exp = s["baseline"]["mean_step_us"], s["experiment"]["mean_step_us"]
        line = (
            f"Step time {base / 1000:,.3f} → {exp / 1000:,.3f} ms: {s['step_delta_us'] / 1000:+,.3f} ms "
            f"({abs(s['regression_pct']):.1f}% {word})"
        )
        big = s["largest_step_change"]
        if big is not None:
            line += f"; largest change: {STEP_LABELS[big['category']]} {big['delta_us'] / 1000:+,.3f} ms"
        console.print(Text(line, style="bold"))
    steps = diff.tables.get("step")
    if steps is None:
        return
    steps = steps.filter((pl.col("baseline_us") != 0) | (pl.col("experiment_us") != 0))
    table = Table(
        title="Step time by category, ms per step (largest change first)",
        header_style="bold", box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False,
    )  # fmt: skip
    for name in ("category", "status", "base ms", "exp ms", "delta ms", "delta %"):
        table.add_column(name, justify="left" if name in ("category", "status") else "right", no_wrap=True)
    for row in steps.iter_rows(named=True):
        pct = "-" if row["delta_pct"] is None else f"{row['delta_pct']:+.1f}"
        table.add_row(
            STEP_LABELS.get(row["category"], row["category"]),
            row["status"],
            *(f"{row[c] / 1000:,.3f}" for c in ("baseline_us", "experiment_us")),
            f"{row['delta_us'] / 1000:+,.3f}",
            pct,
            style="bold" if row["category"] == "total" else None,
        )
    console.print(table)


def _print_summary(console: Console, diff: RunDiff, baseline: str, experiment: str) -> None:
    s = diff.summary
    table = Table(title="kinetolens diff", show_header=False, box=box.SIMPLE)
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("environment", environment_line(s["environment"]))
    table.add_row("baseline", f"{baseline}: {_side_line(s['baseline'])}")
    table.add_row("experiment", f"{experiment}: {_side_line(s['experiment'])}")
    table.add_row("time basis", f"{s['basis']} (self time per op)")
    for level, counts in s["counts"].items():
        if level != "step":
            table.add_row(level, ", ".join(f"{n} {status}" for status, n in counts.items() if n))
    console.print(table)


def _print_explained(console: Console, diff: RunDiff) -> None:
    expl = diff.summary["explained_by"]
    if not expl or not expl["ops"]:
        return
    ops = Table(title="Ops that explain the step-time change", box=box.SIMPLE_HEAD, header_style="bold")
    ops.add_column("op", overflow="fold")
    ops.add_column("status")
    ops.add_column("delta ms", justify="right")
    ops.add_column("% of step delta", justify="right")
    for row in expl["ops"]:
        share = "-" if row["share_pct"] is None else f"{row['share_pct']:.1f}"
        ops.add_row(row["name"], row["status"], f"{row['delta_us'] / 1000:+,.3f}", share)
    ops.caption = (
        f"explained {expl['explained_us'] / 1000:+,.3f} ms, unexplained {expl['unexplained_us'] / 1000:+,.3f} ms "
        f"(all ops net {expl['all_ops_net_us'] / 1000:+,.3f} ms)"
    )
    console.print(ops)


#: Terminal headers (the JSON/CSV keep the full column names).
SHORT_HEADERS = {
    "baseline_us": "base us",
    "experiment_us": "exp us",
    "delta_us": "delta us",
    "delta_pct": "delta %",
}
#: Longest name shown in the terminal; --json and --csv keep whole names.
NAME_CHARS = 72
_TEMPLATE = re.compile(r"<[^<>]*>")
_ARGS = re.compile(r"\([^()]*\)")


def short_name(name: str, chars: int = NAME_CHARS) -> str:
    """A kernel or op name that fits a terminal column: template and call
    arguments folded to ``<…>``/``(…)`` (innermost first), then cut in the middle."""
    if len(name) <= chars:
        return name
    name = name.removeprefix("void ")
    while _TEMPLATE.search(name):  # innermost first; the marker has no brackets
        name = _TEMPLATE.sub("\x00", name)
    name = name.replace("\x00", "<…>")
    if len(name) > chars:
        name = _ARGS.sub("(…)", name)
    if len(name) > chars:
        half = (chars - 1) // 2
        name = f"{name[:half]}…{name[-half:]}"
    return name


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
    shown = table.select(cols).with_columns(
        *(pl.col(k).map_elements(short_name, return_dtype=pl.String) for k in keys),
    )
    return shown.rename(SHORT_HEADERS, strict=False)


def _number(value: object) -> Text:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return Text("-")
    if isinstance(value, float):
        return Text(f"{value:,.1f}")
    return Text(str(value))


def _print_table(console: Console, frame: pl.DataFrame, keys: list[str], title: str) -> None:
    """Numbers never wrap; the name columns take the rest of the width and fold."""
    table = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    for name in frame.columns:
        if name in keys:
            table.add_column(name, overflow="fold", ratio=1, min_width=20)
        else:
            numeric = frame.schema[name].is_numeric()
            table.add_column(name, justify="right" if numeric else "left", no_wrap=True)
    for row in frame.iter_rows():
        table.add_row(*(_number(v) for v in row))
    console.print(table)


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
@click.option("--no-cache", is_flag=True, help="Neither read nor write the Parquet cache.")
def diff_command(
    baseline: str, experiment: str, level: str | None, top: int | None, json_: bool, csv_: bool, tsv: bool,
    fail_if_slower: float | None, exact_names: bool, width: int | None, no_cache: bool,
) -> None:
    """Compare EXPERIMENT with BASELINE per step: first the step-time
    categories that changed most (data loading, GPU kernels, CPU execution,
    ...), then ops and kernels with time and call deltas, what is new and
    gone, and the ops that explain the step-time change.

    Each side is a trace file, a run directory (its ranks are averaged) or a
    logdir with one run.  Times are per step: ms for the step categories, us
    for the tables."""
    machine = json_ or csv_ or tsv
    levels = [level or DEFAULT_LEVEL] if machine else ["step", *([level] if level else DEFAULT_VIEW)]
    diff = compare(
        _load_side(baseline, not no_cache),
        _load_side(experiment, not no_cache),
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
        console = Console(width=width)
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
            _print_table(console, shown, list(LEVEL_KEYS[shown_level]), f"{shown_level} per step, us{more}")
    if fail_if_slower is not None:
        _gate(diff, fail_if_slower)
