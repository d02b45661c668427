"""The terminal view of an inference trace's engine iterations and phases:
``kinetolens phases`` (the command itself is :mod:`kinetolens.cli.phases_command`)
and the summary of an inference trace print its tables."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import polars as pl
from rich.console import Console
from rich.text import Text

from kinetolens.analysis.gputime.overview import CATEGORIES, OTHER
from kinetolens.analysis.gputime.step_times import StepTimes
from kinetolens.analysis.inference.block import InferenceBlock, Iteration
from kinetolens.cli.render import print_table
from kinetolens.model.vocabulary import CATEGORY_HEADERS
from kinetolens.registry.words import counted
from kinetolens.views.inference_words import iterations_title, token_rate


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


def phase_top(table: pl.DataFrame, phase: str, key: str, time: str, n: int) -> pl.DataFrame:
    part = table.filter(pl.col("phase") == phase).head(n)
    return part.select(key, "calls", time, "step_share_pct").rename({"step_share_pct": "pct"})
