"""``kinetolens export``: the model's tables, or the trace annotated for Perfetto."""

from __future__ import annotations

import click

from kinetolens.cli.load_options import TraceLoading, trace_load_options
from kinetolens.registry.words import counted
from kinetolens.registry.table_formats import FORMATS


@click.command("export")
@click.argument("trace", type=str)
@click.option("--format", "fmt", type=click.Choice([*FORMATS, "perfetto"]), default="parquet", show_default=True,
              help="parquet/csv/json: one file per table in the OUT directory; perfetto: one Chrome trace JSON file.")  # fmt: skip
@click.option("-o", "--output", required=True, help="Directory (tables) or file (perfetto; .gz compresses).")
@trace_load_options()
def export_command(trace: str, fmt: str, output: str, loading: TraceLoading) -> None:
    """Write TRACE's tables, or a Chrome/Perfetto trace annotated with kinetolens' attribution.

    The perfetto file opens in ui.perfetto.dev: each kernel's args carry its
    module path, source line, op, FLOPs, bytes, Tensor Core verdict and
    percent of roofline; launch arrows link runtime calls to kernels; counter
    tracks show GPU utilization and memory.
    """
    t = loading.load(trace)
    if fmt == "perfetto":
        from kinetolens.views.perfetto import write_chrome_trace

        n = write_chrome_trace(t, output)
        click.echo(f"kinetolens export: wrote {counted(n, 'event')} to {output}", err=True)
        return
    from kinetolens.views.export_tables import write_tables

    written = write_tables(t, output, fmt)
    rows = sum(getattr(t, name).height for name in written)
    click.echo(f"kinetolens export: wrote {counted(len(written), 'table')} ({counted(rows, 'row')}) to {output}", err=True)
