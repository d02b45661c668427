"""The terminal view of ``kinetolens diff``: the step-time change and the
categories behind it, both sides, the ops that explain it, the level tables,
and the ``--fail-if-slower`` gate (the command itself is
:mod:`kinetolens.cli.diff_command`)."""

from __future__ import annotations

import sys
from typing import Any

import click
import polars as pl
from rich.console import Console
from rich.text import Text

from kinetolens.analysis.diff import RunDiff
from kinetolens.analysis.diff_environment import ENVIRONMENT, environment_warning
from kinetolens.analysis.diff_levels import LEVEL_KEYS
from kinetolens.cli.render import print_pairs, print_table
from kinetolens.model.vocabulary import CATEGORY_WORDS
from kinetolens.registry.kernel_names import short_names
from kinetolens.registry.words import counted


#: Exit status of a gate that fails (bad input is 2, as everywhere).
EXIT_SLOWER = 1


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


def print_lead(console: Console, diff: RunDiff) -> None:
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


def print_summary(console: Console, diff: RunDiff, baseline: str, experiment: str) -> None:
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


def print_explained(console: Console, diff: RunDiff) -> None:
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


def terminal_columns(level: str, table: pl.DataFrame) -> pl.DataFrame:
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


def print_level_table(console: Console, frame: pl.DataFrame, title: str) -> None:
    """Numbers never wrap; the name columns take the rest of the width, two lines at most."""
    print_table(frame, title=title, headers=SHORT_HEADERS, out=console, same_time_unit=True)


def gate(diff: RunDiff, limit_pct: float) -> None:
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
