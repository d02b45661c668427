"""``kinetolens phases``: an inference trace's engine iterations, labelled
prefill / decode / mixed, and its kernels and ops per phase.

``kinetolens summary`` prints the same iteration and phase tables in place
of the step breakdown when the trace is an inference trace (see
docs/inference.md).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import click
import polars as pl
from rich.console import Console
from rich.text import Text

from kinetolens import json_codec
from kinetolens.analysis.gputime.step_times import StepTimes
from kinetolens.analysis.inference.block import InferenceBlock, Iteration
from kinetolens.analysis.inference.phases import (
    inference_block,
    iterations,
    phase_tables,
)
from kinetolens.analysis.workload.ops import rank_basis
from kinetolens.analysis.gputime.overview import CATEGORIES, OTHER
from kinetolens.cli.checks import ROWS, WIDTH
from kinetolens.cli.load_options import TraceLoading, trace_load_options
from kinetolens.registry.words import counted
from kinetolens.cli.render import console as render_console
from kinetolens.cli.render import emit_json, print_heading, print_table
from kinetolens.registry.kernel_names import short_names
from kinetolens.views import units
from kinetolens.views.inference_words import iterations_title, token_rate
from kinetolens.model.vocabulary import CATEGORY_HEADERS

#: Iteration rows the summary shows; ``kinetolens phases`` shows them all.
SUMMARY_ROWS = 12


def _categories(rows: Sequence[Iteration]) -> list[str]:
    """The breakdown categories busy in some iteration (those at 0 everywhere are left out)."""
    return [c for c in (*CATEGORIES, OTHER) if any(r.breakdown_us.part(c) for r in rows)]


#: Shares left out first where the terminal is narrow (last named first): copies and
#: memsets are rarely where an iteration's time goes; "other" completes the 100%.
DROPPABLE = ("memcpy_pct", "memset_pct")


def _shares(part: StepTimes, cats: list[str]) -> dict[str, float | None]:
    """Each category's share of ``part`` (%), keyed ``<category>_pct``."""
    total = part.total
    return {f"{c}_pct": (100.0 * part.part(c) / total if total else None) for c in cats}


def _frame(rows: list[dict[str, Any]], first: dict[str, pl.DataType], cats: list[str]) -> pl.DataFrame:
    schema = {**first, **{f"{c}_pct": pl.Float64 for c in cats}}
    return pl.DataFrame(rows, schema=schema)


def _headers(cats: list[str]) -> dict[str, str]:
    return {"tok_s": "tok/s", **{f"{c}_pct": CATEGORY_HEADERS[c] for c in cats}}


def _left_out(rows: Sequence[Iteration], cats: list[str], what: str) -> str | None:
    zero = [CATEGORY_HEADERS[c] for c in (*CATEGORIES, OTHER) if c not in cats]
    return f"0 in every {what}, left out: {', '.join(zero)}" if zero and rows else None


def _how(rows: Sequence[Iteration]) -> list[str]:
    """How each phase was labelled: the first iteration of each phase, its
    basis in words (one line when every phase was labelled the same way)."""
    seen: dict[str, Iteration] = {}
    for r in rows:
        seen.setdefault(r.phase, r)
    if len(seen) > 1 and len({r.basis for r in seen.values()}) == 1:
        return [f"{', '.join(seen)}: {rows[0].basis}"]
    return [f"{p} (iteration {r.iteration}): {r.basis}" for p, r in seen.items()]


def print_inference(console: Console, block: InferenceBlock, *, limit: int | None = SUMMARY_ROWS) -> None:
    """The iterations table (the first ``limit`` rows) with each one's
    breakdown as % of its time, how each phase was labelled, and the
    per-phase table (breakdown of the mean iteration)."""
    rows = block.iterations
    if not rows:
        return
    shown = rows if limit is None else rows[:limit]
    cats = _categories(rows)
    # tokens only where some iteration counts them (a diffusion pipeline's do not)
    tokens = any(r.tokens is not None for r in rows)
    counted_tokens = {"tokens": pl.Int64, "tok_s": pl.String} if tokens else {}
    frame = _frame(
        [{"it": r.iteration, "phase": r.phase, "us": r.dur_us,
          **({"tokens": r.tokens, "tok_s": token_rate(r.tokens_per_s)} if tokens else {}),
          **_shares(r.breakdown_us, cats)} for r in shown],
        {"it": pl.Int64, "phase": pl.String, "us": pl.Float64, **counted_tokens}, cats,
    )  # fmt: skip
    notes = [] if len(shown) == len(rows) else [f"{len(shown)} of {counted(len(rows), 'iteration')} shown: kinetolens phases lists them all"]
    notes += [n for n in (_left_out(rows, cats, "iteration"),) if n]
    print_table(frame, title=f"{iterations_title(block)} (% of each iteration)", caption="\n".join(notes) or None,
                headers=_headers(cats), droppable=DROPPABLE, out=console)  # fmt: skip
    width = min(console.width, 100_000)
    console.print(Text("How each phase was labelled", style="bold"))
    for line in _how(rows):
        console.print(Text(textwrap.fill(line, width, initial_indent="  ", subsequent_indent="    ")))
    console.line()
    frame = _frame(
        [{"phase": p.phase, "iters": p.iterations, "mean_us": p.mean_us,
          **({"tokens": p.tokens, "tok_s": token_rate(p.tokens_per_s)} if tokens else {}),
          **_shares(p.average_us, cats)} for p in block.phases],
        {"phase": pl.String, "iters": pl.Int64, "mean_us": pl.Float64, **counted_tokens}, cats,
    )  # fmt: skip
    caption = "tok/s: tokens over the iterations' time (host range to the end of their GPU work)" if tokens else None
    print_table(frame, title="Phases (% of the mean iteration)", caption=caption, headers=_headers(cats),
                droppable=DROPPABLE, out=console)  # fmt: skip


#: The ops' ranking column, in words.


def _top(table: pl.DataFrame, phase: str, key: str, time: str, n: int) -> pl.DataFrame:
    part = table.filter(pl.col("phase") == phase).head(n)
    return part.select(key, "calls", time, "step_share_pct").rename({"step_share_pct": "pct"})


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
            print_table(_top(kernels, phase, "kernel", "device_total_us", top), title=f"Top kernels in {phase} (% of {phase} time)",
                        headers={"pct": "% time"}, out=console)  # fmt: skip
        if ops.height:
            print_table(_top(ops, phase, "name", basis, top), title=f"Top ops in {phase} by {units.basis_words(basis)} (% of {phase} time)",
                        headers={"pct": "% time", "name": "op"}, out=console)  # fmt: skip
