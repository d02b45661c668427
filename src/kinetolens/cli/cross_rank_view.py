"""``kinetolens critical-path RUNDIR``: the critical path across a run's ranks, in the terminal or as JSON."""

from __future__ import annotations

import click
import polars as pl
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kinetolens.analysis.paths.cross_rank_path import CrossRankPath, combined
from kinetolens.analysis.paths.cross_rank_run import path_bounds, run_path
from kinetolens.cli.render import console as render_console
from kinetolens.cli.render import echo_notes, emit_json
from kinetolens.registry.kernel_names import short_names
from kinetolens.registry.words import counted
from kinetolens.runs.graphs import run_graphs, run_paths
from kinetolens.views.units import duration, in_unit, middle, percent, time_unit
from kinetolens.model.vocabulary import BOUND_WORDS as LABELS

MAX_STEP_ROWS = 12


def show_run(
    run_dir: str, step: int | None, top: int, json_: bool, width: int | None, executor: str | None, cache: bool,
    strict: bool = False,
) -> None:
    notes: list[str] = []
    ranks = run_graphs(run_dir, executor, cache=cache, notes=notes, strict=strict)
    echo_notes(notes)
    paths = run_paths(ranks, step, run_dir)
    if json_:
        _, length = combined(paths)
        emit_json(
            {
                "run": str(run_dir),
                "ranks": len(ranks),
                "length_us": length,
                "steps": [_step_json(cp) for cp in paths],
            }
        )
        return
    _print(render_console(width), len(ranks), paths, top)


def _step_json(cp: CrossRankPath) -> dict:
    return {
        "step": cp.step,
        "ranks": cp.ranks,
        "length_us": cp.length_us,
        "slowest_step_us": cp.slowest_step_us,
        "verdict": cp.verdict,
        "summary": cp.summary.to_dicts(),
        "by_rank": cp.by_rank.to_dicts(),
        "gates": cp.gates.to_dicts(),
        "last_at": cp.last_at.to_dicts(),
        "path": cp.path.drop("eid").to_dicts(),
    }


def _table(title: str | None = None) -> Table:
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold", collapse_padding=True)


def _print(console: Console, ranks: int, paths: list[CrossRankPath], top: int) -> None:
    run = run_path(paths, top_ranks=top, top=top)
    label = f"step {paths[0].step}" if len(paths) == 1 else f"{len(paths)} steps"
    console.print(Text(f"Critical path across {ranks} ranks, {label}", style="bold"))
    if len(paths) > 1:
        _print_steps(console, paths)
    for verdict in run.verdicts[:MAX_STEP_ROWS]:
        console.print(Text(verdict))
    console.print(f"length {duration(run.length_us)}; the slowest rank's step{'s' if len(paths) > 1 else ''} {duration(run.slowest_us)}")
    summary = run.summary
    if summary.height:
        unit, scale = time_unit(summary["us"].max())
        t = _table()
        for header, justify in (("bound by", "left"), (f"time {unit}", "right"), ("share", "right")):
            t.add_column(header, justify=justify)  # type: ignore[arg-type]
        for row in summary.iter_rows(named=True):
            t.add_row(LABELS.get(row["bound_by"], row["bound_by"]), in_unit(row["us"], scale), percent(row["pct"] / 100))
        console.print(t)
    shares = run.ranks
    if shares.height:
        unit, scale = time_unit(shares["us"].max())
        t = _table("By rank")
        for header, justify in (("rank", "right"), (f"time {unit}", "right"), ("share", "right")):
            t.add_column(header, justify=justify)  # type: ignore[arg-type]
        for row in shares.iter_rows(named=True):
            who = str(row["rank"]) if row["rank"] is not None else counted(row["ranks"], "other")
            t.add_row(who, in_unit(row["us"], scale), percent(row["pct"] / 100))
        console.print(t)
    gates = run.gates
    if gates.height:
        t = _table("Collectives on the path")
        for header, justify in (("step", "right"), ("collective", "left"), ("call", "right"), ("last rank", "right"), ("held", "right")):
            t.add_column(header, justify=justify, no_wrap=True)  # type: ignore[arg-type]
        for row in gates.head(top).iter_rows(named=True):
            held = row["held_ms"]
            t.add_row(str(row["step"]), row["collective"], str(row["seq"]), str(row["gate_rank"]), duration(held * 1000) if held is not None else "-")
        console.print(t)
    work = run.work
    if work.height:
        gpu = pl.col("bound_by").is_in(["launch_overhead", "kernel_gap", "gpu_compute", "gpu_memory", "communication"])
        work = work.with_columns(pl.when(gpu).then(short_names(work["name"])).otherwise(pl.col("name")).alias("name"))
        chars = max(16, min(60, console.width - 44))
        unit, scale = time_unit(work["us"].max())
        t = _table("On the path")
        t.add_column("rank", justify="right", no_wrap=True)
        t.add_column("name", no_wrap=True)
        t.add_column("bound by", no_wrap=True)
        t.add_column(f"time {unit}", justify="right", no_wrap=True)
        t.add_column("share", justify="right", no_wrap=True)
        for row in work.iter_rows(named=True):
            t.add_row(str(row["rank"]), Text(middle(row["name"], chars)), LABELS.get(row["bound_by"], row["bound_by"]), in_unit(row["us"], scale), percent(row["pct"] / 100))
        console.print(t)


def _print_steps(console: Console, paths: list[CrossRankPath]) -> None:
    t = _table("Per step")
    unit, scale = time_unit(max(cp.slowest_step_us for cp in paths))
    for header, justify in (("step", "right"), (f"length {unit}", "right"), (f"slowest rank {unit}", "right"), ("gated by", "right")):
        t.add_column(header, justify=justify)  # type: ignore[arg-type]
    for cp in paths[:MAX_STEP_ROWS]:
        gate = cp.gate_rank
        t.add_row(str(cp.step), in_unit(cp.length_us, scale), in_unit(cp.slowest_step_us, scale), f"rank {gate}" if gate is not None else "-")
    if len(paths) > MAX_STEP_ROWS:
        t.add_row(f"+{len(paths) - MAX_STEP_ROWS}", "", "", "")
    console.print(t)


def show_run_whatif(
    run_dir: str, changes: list, step: int | None, json_: bool, width: int | None, cache: bool, strict: bool = False
) -> None:
    """``kinetolens whatif RUNDIR --change rank:N=median``: the predicted step after the changes."""
    from kinetolens.analysis.paths.cross_rank_whatif import RunWhatIf
    from kinetolens.analysis.paths.whatif import BadChange
    from kinetolens.runs.graphs import run_whatif

    notes: list[str] = []
    ranks = run_graphs(run_dir, None, cache=cache, notes=notes, strict=strict)
    echo_notes(notes)
    try:
        preds = run_whatif(ranks, changes, step, run_dir)
    except BadChange as exc:
        raise click.BadParameter(str(exc), param_hint="'--change'") from None
    result = RunWhatIf(ranks=len(ranks), changes=tuple(c.spec for c in changes), steps=tuple(preds))
    measured, predicted, delta = result.measured_us, result.predicted_us, result.delta_us
    if json_:
        emit_json(result.to_json(str(run_dir)))
        return
    con = render_console(width)
    what = f"step {preds[0].step}" if len(preds) == 1 else f"{len(preds)} steps, mean"
    con.print(Text(f"What if: {', '.join(c.spec for c in changes)} ({len(ranks)} ranks, {what})", style="bold"))
    for p in preds[:MAX_STEP_ROWS]:
        for row in p.scaled.iter_rows(named=True):
            con.print(
                f"step {p.step}: rank {row['rank']}'s own work {duration(row['own_us'])} -> "
                f"{duration(row['new_us'])} "
                f"(the other ranks' median {duration(row['median_us'])})"
            )
    con.print(f"measured step (slowest rank)  {duration(measured)}")
    sign = "+" if delta >= 0 else "-"
    con.print(f"predicted step                {duration(predicted)}  ({sign}{duration(abs(delta))}, {(result.delta_pct or 0) / 100:+.1%})")
    con.print(Text(f"now:   {preds[-1].before.verdict}"))
    con.print(Text(f"after: {preds[-1].after.verdict}"))
    path, length = combined([p.after for p in preds])
    summary = path_bounds(path, length)
    if summary.height:
        unit, scale = time_unit(summary["us"].max())
        t = _table("New critical path")
        for header, justify in (("bound by", "left"), (f"time {unit}", "right"), ("share", "right")):
            t.add_column(header, justify=justify)  # type: ignore[arg-type]
        for row in summary.filter(pl.col("us") > 0).iter_rows(named=True):
            t.add_row(LABELS.get(row["bound_by"], row["bound_by"]), in_unit(row["us"], scale), percent(row["pct"] / 100))
        con.print(t)
