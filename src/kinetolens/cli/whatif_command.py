"""``kinetolens whatif``: the step time a change would give, by re-timing the step's dependency graph."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from kinetolens.cli.checks import WIDTH
from kinetolens.cli.load_options import TraceLoading, strict_option, trace_load_options

if TYPE_CHECKING:
    from kinetolens.analysis.paths.whatif import Change, WhatIf

# The analyses, polars and rich are imported where a command runs: its
# --help needs none of them.

#: The summary rows for time off the modelled path.
EXTRA = {"untraced": "untraced, as measured", "previous_step": "previous step's GPU work"}


def _changes(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> list[Change]:
    from kinetolens.analysis.paths.whatif import BadChange, parse_change

    try:
        return [parse_change(v) for v in value]
    except BadChange as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.argument("trace", metavar="TRACE|RUNDIR")
@click.option("-c", "--change", "changes", multiple=True, required=True, callback=_changes,
              help="A change: kernel:NAME=F, op:NAME=F, module:NAME=F, category:C=F, launch:F, overlap:communication (repeatable).")
@click.option("--step", type=int, default=None, help="Only this profiler step (default: every complete step, averaged).")
@click.option("--json", "json_", is_flag=True, help="Measured and predicted time per step, and the new path's split, as JSON.")
@click.option("-w", "--width", type=WIDTH, default=None, help="Terminal width (default: the terminal's).")
@click.option(
    "--windows/--whole", "windows", default=None,
    help="Read the trace a step window at a time (memory bounded by a step; the same prediction), or whole; "
    "default: a step window at a time from 1.5 GB of JSON.",
)
@trace_load_options()
@strict_option
def whatif_command(
    trace: str, changes: list[Change], step: int | None, json_: bool, width: int | None, loading: TraceLoading,
    strict: bool, windows: bool | None = None,
) -> None:
    """Predict the step time after CHANGES, and what would bound the step then.

    Each change scales durations in the step's dependency graph (0.5: twice
    as fast, 0: removed); what waited on them moves up, waits that no
    longer have anything to wait for shrink, and untraced gaps stay.
    Categories are critical-path's: cpu, data_loading (or dataloader),
    launch_overhead, kernel_gap, gpu_compute, gpu_memory, communication.
    """
    from kinetolens.analysis.paths.whatif import whatif
    from kinetolens.cli.critical_path_command import is_run_dir

    if is_run_dir(trace):  # every rank's step joined at collectives; rank:N=median, category:C=F
        from kinetolens.cli.cross_rank_view import show_run_whatif

        show_run_whatif(trace, changes, step, json_, width, loading.cache, strict)
        return

    from kinetolens.cli.render import emit_json

    result = _in_windows(trace, changes, step, windows, loading)
    if result is None:
        result = whatif(loading.load(trace), changes, step)
    if not result.steps:
        raise click.ClickException(f"{trace}: no step with CPU ops to re-time")
    if json_:
        emit_json(_json(result))
        return
    _print(result, width)


def _in_windows(
    trace: str, changes: list[Change], step: int | None, windows: bool | None, loading: TraceLoading
) -> WhatIf | None:
    """The prediction read a step window at a time where ``windows`` asks for it
    (None: from the trace's size), with a note on stderr; None to read the trace whole."""
    from kinetolens.registry.words import counted
    from kinetolens.runs.windowed_read import whatif_in_windows

    def read(path: Path, notes: list[str]) -> WhatIf | None:
        result = whatif_in_windows(path, changes, step, notes=notes)
        if result is not None and result.steps:  # none: the command's one line says so
            notes.append(f"{trace}: read a step window at a time ({counted(len(result.steps), 'step')} re-timed)")
        return result

    return loading.in_windows(trace, windows, read)


def _json(r: WhatIf) -> dict:
    return {
        "changes": [c.spec for c in r.changes],
        "matched": r.matched,
        "measured_us": r.measured_us,
        "predicted_us": r.predicted_us,
        "delta_us": r.delta_us,
        "delta_pct": 100 * r.delta_us / r.measured_us if r.measured_us else None,
        "host_floor_us": r.host_floor_us,
        "at_host_floor": r.at_host_floor,
        "summary": r.summary().to_dicts(),
        "steps": [
            {"step": s.window.step, "window": s.window.label, "measured_us": s.measured_us, "predicted_us": s.predicted_us, "length_us": s.length_us}
            for s in r.steps
        ],
    }


def _print(r: WhatIf, width: int | None) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from kinetolens.cli.render import console as render_console
    from kinetolens.model.vocabulary import BOUND_WORDS as LABELS
    from kinetolens.views.units import duration, in_unit, percent, time_unit

    con = render_console(width)
    what = f"step {r.steps[0].window.step}" if len(r.steps) == 1 and r.steps[0].window.step is not None else (
        f"{len(r.steps)} steps, mean" if len(r.steps) > 1 else r.steps[0].window.label
    )
    con.print(Text(f"What if: {', '.join(c.spec for c in r.changes)} ({what})", style="bold"))
    for spec, n in r.matched.items():
        if n == 0:
            con.print(Text(f"note: {spec} matched nothing in the step's graph", style="yellow"))
    pct = r.delta_us / r.measured_us if r.measured_us else 0.0
    con.print(f"measured step   {duration(r.measured_us)}")
    con.print(f"predicted step  {duration(r.predicted_us)}  ({'+' if r.delta_us >= 0 else '-'}{duration(abs(r.delta_us))}, {pct:+.1%})")
    if r.at_host_floor:
        con.print(
            Text(f"the step is bound by host work: faster kernels cannot shorten it below {duration(r.host_floor_us)}", style="yellow")
        )
    summary = r.summary()
    if summary.height == 0:
        return
    unit, scale = time_unit(summary["us"].max())
    table = Table(title="New critical path", title_justify="left", box=box.SIMPLE_HEAD, header_style="bold", collapse_padding=True)
    for header, justify in (("bound by", "left"), (f"time {unit}", "right"), ("share", "right")):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for row in summary.filter(summary["us"] > 0).iter_rows(named=True):
        label = LABELS.get(row["bound_by"]) or EXTRA.get(row["bound_by"], row["bound_by"])
        table.add_row(label, in_unit(row["us"], scale), percent(row["pct"] / 100))
    con.print(table)
