"""``kinetolens modules``: the nn.Module tree, or its roll-up by module class."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kinetolens.cli.checks import WIDTH, check_step
from kinetolens.cli.load_options import TraceLoading, trace_load_options

if TYPE_CHECKING:
    from kinetolens.runs.windowed_read import WindowedModules

#: Depth the terminal tree stops at without --depth (the model, its layers, their blocks).
TERMINAL_DEPTH = 2
HEADERS = {
    "fwd_total_us": "fwd\ntotal us",
    "bwd_total_us": "bwd\ntotal us",
    "fwd_self_us": "fwd\nself us",
    "bwd_self_us": "bwd\nself us",
    "recompute_total_us": "recompute\ntotal us",
    "self_us": "self\nus",
    "total_us": "total\nus",
    "mean_us": "mean\nus",
    "min_us": "min\nus",
    "max_us": "max\nus",
    "step_share_pct": "%\nstep",
    "tflops_s": "TFLOP\n/s",
    "pct_of_roof": "%\nroof",
    "count": "n",
}
#: Caption of a trace without GPU kernels, whose module times are host time (as `ops` ranks it).
HOST_NOTE = "no GPU kernels: times are host (CPU) time, self: the module's own ops'; total adds its children's"
TREE_COLUMNS = (
    "module", "calls", "fwd_total_us", "bwd_total_us", "recompute_total_us", "self_us", "step_share_pct", "tflops_s", "pct_of_roof",
)  # fmt: skip
TYPE_COLUMNS = ("type", "count", "total_us", "mean_us", "min_us", "max_us", "step_share_pct", "tflops_s", "pct_of_roof")
#: Dropped first (last named first) where the terminal is narrow.
DROPPABLE = (
    "pct_of_roof", "tflops_s", "step_share_pct", "total_us", "self_us", "min_us", "max_us", "recompute_total_us",
    "bwd_total_us", "calls",
)  # fmt: skip


@click.command("modules")
@click.argument("trace", type=str)
@click.option("--depth", type=click.IntRange(min=0), default=None, help=f"Deepest level shown (0: the roots; terminal default {TERMINAL_DEPTH}).")
@click.option(
    "--by", "by", type=click.Choice(["tree", "type"]), default="tree", show_default=True,
    help="tree: every module under its parent; type: one row per module class (Qwen2Attention x24).",
)
@click.option("--step", type=int, default=None, help="Only this profiler step.")
@click.option("--csv", is_flag=True)
@click.option("--json", "json_", is_flag=True)
@click.option("-w", "--width", type=WIDTH, default=None, help="Terminal width for the table.")
@click.option(
    "--windows/--whole", "windows", default=None,
    help="Read the trace a step window at a time (memory bounded by a step; without --step), or whole; "
    "default: a step window at a time from 1.5 GB of JSON.",
)
@trace_load_options(capture=True)
def modules_command(
    trace: str, depth: int | None, by: str, step: int | None, csv: bool, json_: bool, width: int | None,
    loading: TraceLoading, windows: bool | None = None,
) -> None:
    """GPU time per nn.Module: forward and backward, self and total, FLOPs and % of roofline
    (host time in a trace without GPU kernels, as kinetolens ops ranks it).

    A module's self time is its own kernels'; its total adds its children's.
    Kernels outside every module (the optimizer, copies) are '(no module)'.
    Needs a trace recorded with with_stack=True or with_modules=True.
    """
    # here, not at the top: the command's --help needs neither polars nor rich
    import polars as pl

    from kinetolens.analysis.hardware.gpu_spec import gpu_spec
    from kinetolens.analysis.hardware.module_tree import by_depth, by_type, module_tree
    from kinetolens.analysis.workload.ops import share_whole_note
    from kinetolens.cli.render import emit, print_table
    from kinetolens.views import units

    read = _modules_in_windows(trace, windows, step, loading)
    if read is not None:
        tree, gpu, share_note, read_notes = read.tree, read.gpu, read.share_note, [read.read]
    else:
        loaded = loading.load(trace)
        check_step(trace, loaded, step)
        tree, gpu = module_tree(loaded, gpu_spec(loaded), step=step), loaded.kernels.height > 0
        share_note, read_notes = share_whole_note(loaded, step), []
    if tree.filter(pl.col("path") != "(no module)").height == 0:
        raise click.UsageError(f"{trace}: no nn.Module hierarchy in this trace (profile with with_stack=True or with_modules=True)")
    machine = csv or json_
    if by == "type":
        table = by_type(by_depth(tree, depth))
        if machine:
            emit(table, "csv" if csv else "json")
            return
        caption = "per module class: times summed over its instances; mean, min, max: of one instance's total"
        caption += "" if gpu else f"\n{HOST_NOTE}"
        caption += f"\n{share_note}" if share_note else ""
        caption += f"\n{beats}" if (beats := units.beats_model_note(table, "type")) else ""
        caption += "".join(f"\n{n}" for n in read_notes)
        print_table(
            table.select(TYPE_COLUMNS), title="modules by type", caption=caption, width=width,
            headers=HEADERS, droppable=[c for c in DROPPABLE if c in TYPE_COLUMNS], same_time_unit=True,
        )
        return
    if machine:
        emit(by_depth(tree, depth), "csv" if csv else "json")
        return
    shown = by_depth(tree, TERMINAL_DEPTH if depth is None else depth)
    recomputed = bool(tree["recompute_total_us"].sum() > 0)
    columns = [c for c in TREE_COLUMNS[1:] if recomputed or c != "recompute_total_us"]
    frame = shown.select(
        module=pl.concat_str(pl.lit("  ").repeat_by(pl.col("depth")).list.join(""), pl.col("name")),
        **{c: c for c in columns},
    )
    notes = ["self: the module's own kernels; total adds its children's" if gpu else HOST_NOTE]
    if recomputed:
        notes.append("recompute: forward run again in backward (activation checkpointing), in neither fwd nor bwd")
    deeper = tree.height - shown.height
    if deeper:
        notes.append(f"{deeper} deeper modules not shown (--depth N; --by type rolls repeated layers up)")
    if share_note:
        notes.append(share_note)
    if beats := units.beats_model_note(shown, "name"):
        notes.append(beats)
    notes.extend(read_notes)
    print_table(
        frame, title="modules", caption="\n".join(notes), width=width, headers=HEADERS,
        droppable=[c for c in DROPPABLE if c in TREE_COLUMNS], same_time_unit=True,
    )


def _modules_in_windows(trace: str, windows: bool | None, step: int | None, loading: TraceLoading) -> WindowedModules | None:
    """The module tree read a step window at a time where ``windows`` asks for
    it (None: from the trace's size; never with ``--step``), else None."""
    from kinetolens.runs.windowed_read import modules_in_windows

    if step is not None:
        if windows is True:
            raise click.BadParameter("a step window at a time reads every step; --step reads the trace whole", param_hint="--windows")
        return None
    return loading.in_windows(trace, windows, lambda path, notes: modules_in_windows(path, notes=notes))
