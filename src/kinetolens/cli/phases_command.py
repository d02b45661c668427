"""``kinetolens phases``: an inference trace's engine iterations, labelled
prefill / decode / mixed, and its kernels and ops per phase.

``kinetolens summary`` prints the same iteration and phase tables in place
of the step breakdown when the trace is an inference trace (see
docs/inference.md); both print them with :mod:`kinetolens.cli.phases_output`.
"""

from __future__ import annotations

from typing import Any

import click

from kinetolens.cli.checks import ROWS, WIDTH
from kinetolens.cli.load_options import TraceLoading, trace_load_options


@click.command("phases")
@click.argument("trace", type=str)
@click.option("--json", "json_", is_flag=True, help="JSON: iterations, phases, and each phase's top kernels and ops.")
@click.option("-n", "--top", type=ROWS, default=10, show_default=True, help="Kernels and ops shown per phase.")
@click.option("-w", "--width", type=WIDTH, default=None, help="Terminal width for the tables.")
@trace_load_options(capture=True)
def phases_command(trace: str, json_: bool, top: int, width: int | None, loading: TraceLoading) -> None:
    """An inference trace's engine iterations, each labelled prefill, decode
    or mixed (and how), with time, tokens/s, breakdown, and the top kernels
    and ops of each phase (docs/inference.md)."""
    # here, not at the top: the command's --help needs neither polars nor rich
    import polars as pl
    from rich.text import Text

    from kinetolens import json_codec
    from kinetolens.analysis.inference.phases import inference_block, iterations, phase_tables
    from kinetolens.analysis.workload.ops import rank_basis
    from kinetolens.cli.phases_output import phase_top, print_inference
    from kinetolens.cli.render import console as render_console
    from kinetolens.cli.render import emit_json, print_heading, print_table
    from kinetolens.registry.kernel_names import short_names
    from kinetolens.views import units

    t = loading.load(trace)
    block = inference_block(t)
    its = iterations(t) if block.iterations else None
    kernels = phase_tables(t, its, by="kernel") if its is not None else pl.DataFrame()
    ops = phase_tables(t, its, by="op") if its is not None else pl.DataFrame()
    basis = rank_basis(t)
    if kernels.height:
        kernels = kernels.with_columns(kernel=short_names(kernels["name"]))
    if json_:
        def per_phase(table: pl.DataFrame, cols: list[str]) -> dict[str, list[dict[str, Any]]]:
            if table.height == 0:
                return {}
            return {p: table.filter(pl.col("phase") == p).head(top).select(cols).to_dicts() for p in table["phase"].unique(maintain_order=True)}

        kcols = ["name", "calls", "device_total_us", "step_share_pct", "tflops_s", "gbps"]
        ocols = ["name", "calls", basis, "device_total_us", "host_total_us", "step_share_pct"]
        emit_json({**json_codec.to_builtins(block), "kernels": per_phase(kernels, kcols), "ops": per_phase(ops, list(dict.fromkeys(ocols)))})
        return
    console = render_console(width)
    if not block.detected:
        why = block.against or "no engine iteration annotation, decode step, KV-cache op or graph replay found"
        console.print(Text(f"{trace}: not an inference trace ({why}); kinetolens summary shows its steps."))
        return
    print_heading(console, f"kinetolens phases: {trace}")
    console.print(Text("inference: " + ", ".join(block.evidence)))
    console.line()
    if not block.iterations:
        console.print(Text("No engine iterations found: no engine annotation, and no decode step from shapes."))
        return
    print_inference(console, block, limit=None)
    for phase in dict.fromkeys(r.phase for r in block.iterations):
        if kernels.height:
            print_table(phase_top(kernels, phase, "kernel", "device_total_us", top), title=f"Top kernels in {phase} (% of {phase} time)",
                        headers={"pct": "% time"}, out=console)  # fmt: skip
        if ops.height:
            print_table(phase_top(ops, phase, "name", basis, top), title=f"Top ops in {phase} by {units.basis_words(basis)} (% of {phase} time)",
                        headers={"pct": "% time", "name": "op"}, out=console)  # fmt: skip
