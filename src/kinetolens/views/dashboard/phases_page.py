"""The overview of an inference trace: its engine iterations and phases
(prefill, decode, mixed) where a training trace shows its steps.

The numbers are the summary's ``inference`` block
(:func:`kinetolens.analysis.inference.phases.inference_block`) and each
phase's kernel and op tables (:func:`kinetolens.analysis.inference.phases.phase_tables`);
the frames and the chart are the report's (:mod:`kinetolens.views.report_phases`),
here paged by the server like every dashboard table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from kinetolens.analysis.inference.block import InferenceBlock
from kinetolens.analysis.inference.phases import inference_block
from kinetolens.views import units
from kinetolens.views.dashboard.blocks import figure, table, text
from kinetolens.views.dashboard.sources import BadParameter, Ctx
from kinetolens.views.inference_words import inference_rows, iterations_sentence, iterations_title
from kinetolens.views.report_phases import (
    iteration_figure,
    iteration_frame,
    per_phase_tables,
    phase_frame,
)

#: Rows of each phase's kernel and op tables (the browser pages them).
TOP_PER_PHASE = 50


def inference(ctx: Ctx) -> InferenceBlock | None:
    """The trace's inference block when it shows iterations instead of steps, else None."""
    block = ctx.memo("inference_block", lambda: inference_block(ctx.trace))
    return block if block.iterations else None


def _per_phase(ctx: Ctx) -> dict[str, dict[str, pl.DataFrame]]:
    return ctx.memo("per_phase_tables", lambda: per_phase_tables(ctx.trace, top=TOP_PER_PHASE, short=False))


def cards(block: InferenceBlock) -> list[list[str]]:
    """The overview's cards for the iterations (in place of steps and mean step)."""
    rows = dict(inference_rows(block))
    out = [["iterations", rows["iterations"]]]
    unit, scale = units.time_unit(max(p.mean_us for p in block.phases))  # one unit across the cards
    out += [[f"mean {p.phase} iteration", f"{units.in_unit(p.mean_us, scale)} {unit}"] for p in block.phases]
    if "tokens" in rows:
        out.append(["tokens", rows["tokens"]])
    return out


def blocks(ctx: Ctx, block: InferenceBlock) -> list[dict[str, Any]]:
    """The iterations chart, the per-iteration and per-phase tables, and each phase's top kernels and ops."""
    out = [
        text(iterations_sentence(block)),
        figure(iteration_figure(block)),
        table("phase_iterations", f"{iterations_title(block)}: phase, time, "
              f"{'' if block.model_forwards else 'tokens, '}breakdown (% of the iteration), basis", sort=None),
        table("phases", "Per phase (breakdown: % of the mean iteration)", sort=None),
    ]  # fmt: skip
    per_phase = _per_phase(ctx)
    phases = list(per_phase)
    for what, noun in (("kernels", "kernels"), ("ops", "ops")):
        present = [p for p in phases if what in per_phase[p]]
        if not present:
            continue
        if len(present) == 1:
            title = f"Top {noun} in {present[0]} (% of {present[0]} time)"
            out.append(table(f"phase_{what}", title, sort=None))
        else:
            title = f"Top {noun} per phase (% of that phase's time)"
            out.append(table(f"phase_{what}", title, sort=None, choices={"phase": present}))
    return out


def _block_of(ctx: Ctx) -> InferenceBlock:
    block = inference(ctx)
    if block is None:
        raise BadParameter("this trace shows steps, not inference iterations")
    return block


def phase_iterations(ctx: Ctx) -> pl.DataFrame:
    return iteration_frame(_block_of(ctx), basis=True)


def phases(ctx: Ctx) -> pl.DataFrame:
    return phase_frame(_block_of(ctx))


def _phase_part(ctx: Ctx, what: str) -> pl.DataFrame:
    per_phase = _per_phase(ctx)
    present = tuple(p for p in per_phase if what in per_phase[p])
    if not present:
        return pl.DataFrame()
    return per_phase[ctx.choice("phase", present)][what]


def phase_kernels(ctx: Ctx) -> pl.DataFrame:
    return _phase_part(ctx, "kernels")


def phase_ops(ctx: Ctx) -> pl.DataFrame:
    return _phase_part(ctx, "ops")


SOURCES: dict[str, Callable[[Ctx], pl.DataFrame]] = {
    "phase_iterations": phase_iterations,
    "phases": phases,
    "phase_kernels": phase_kernels,
    "phase_ops": phase_ops,
}
