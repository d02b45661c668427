"""``kinetolens compiled``: torch.compile's generated kernels and what each fuses."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from kinetolens.cli.checks import WIDTH
from kinetolens.cli.load_options import TraceLoading, trace_load_options

if TYPE_CHECKING:
    from kinetolens.runs.windowed_read import WindowedCompiled

HEADERS = {
    "name": "kernel",
    "total_us": "total\nus",
    "fused_ops": "fused ops",
    "pct_of_roof": "%\nroof",
}
#: Below this terminal width kernel names are shortened to their kind and number (--csv/--json: whole).
FULL_NAMES = 140
#: Below this one, calls are left out too.
NARROW = 100
COLUMNS = ("name", "dir", "calls", "total_us", "fused_ops", "modules", "flops", "bytes", "pct_of_roof")
#: Dropped where the terminal is narrow, last named first.
DROPPABLE = ("flops", "calls", "pct_of_roof", "bytes")


@click.command("compiled")
@click.argument("trace", type=str)
@click.option("--csv", is_flag=True)
@click.option("--json", "json_", is_flag=True)
@click.option("-w", "--width", type=WIDTH, default=None, help="Terminal width for the table.")
@click.option(
    "--windows/--whole", "windows", default=None,
    help="Read TRACE a step window at a time (memory bounded by a step), or whole; "
    "default: a step window at a time from 1.5 GB of JSON.",
)
@trace_load_options(capture=True)
def compiled_command(
    trace: str, csv: bool, json_: bool, width: int | None, loading: TraceLoading, windows: bool | None = None
) -> None:
    """Kernels torch.compile generated (inductor C++ and Triton): the source
    ops and nn.Modules each fuses, FLOPs and bytes per call (the sum of the
    fused ops'), and % of roofline where the GPU's peaks are known.

    Traces captured with kinetolens (profile or run) while the model
    compiled record each kernel's ops, shapes and modules; otherwise the
    kernel's name gives its ops (provenance: name).  C++ kernels' times are
    host time.
    """
    # here, not at the top: the command's --help needs neither polars nor rich
    import polars as pl

    from kinetolens.analysis.hardware.compiled_kernels import compiled_kernel_table
    from kinetolens.analysis.hardware.gpu_spec import gpu_spec
    from kinetolens.cli.render import echo_notes, emit, print_table, terminal_width

    def in_windows(path: Path, notes: list[str]) -> WindowedCompiled | None:
        from kinetolens.runs.windowed_read import compiled_in_windows  # only for a trace read so

        return compiled_in_windows(path, gpu_spec, notes=notes)

    read = loading.in_windows(trace, windows, in_windows)
    if read is not None:
        table = read.table
        echo_notes([read.read])
    else:
        loaded = loading.load(trace)
        table = compiled_kernel_table(loaded, gpu_spec(loaded))
    if not table.height:
        raise click.UsageError(
            f"{trace}: no torch.compile kernels in this trace (inductor's C++ kernels are named only when "
            "compiled under kinetolens.profile / kinetolens run, or with TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1)"
        )
    if csv or json_:
        emit(table, "csv" if csv else "json")
        return
    # an empty list: the compiled module's own forward (recorded), or not known (from the name)
    empty = pl.when(pl.col("provenance") == "inductor").then(pl.lit("(root)")).otherwise(pl.lit("-"))
    shown = table.with_columns(modules=pl.when(pl.col("modules") == "").then(empty).otherwise(pl.col("modules")))
    term = terminal_width(width) or FULL_NAMES
    narrow = term < NARROW
    if term < FULL_NAMES:  # the fused ops column lists what the name spells out
        shown = shown.with_columns(pl.col("name").str.replace(r"^(cpp|triton_[a-z]+)_fused_.+(_\d+)$", "${1}…${2}"))
    cols = [c for c in COLUMNS if c != "pct_of_roof" or shown["pct_of_roof"].is_not_null().any()]
    if narrow:
        cols.remove("calls")
    notes = [
        "flops, bytes: per call, the sum of the fused ops'; modules: paths inside the compiled module "
        "((root): the compiled module's own code)"
    ]
    by_name = shown.filter(pl.col("provenance") == "name").height
    if by_name:
        notes.append(f"{by_name} kernel(s) described from their names only (compiled before kinetolens watched)")
    if (shown["backend"] == "cpp").any():
        notes.append("C++ kernels: host time of their profiler range")
    print_table(
        shown.select(cols), title="torch.compile kernels", caption="\n".join(notes), width=width, headers=HEADERS,
        droppable=[c for c in DROPPABLE if c in cols],
    )
