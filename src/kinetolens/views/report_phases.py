"""The report's phases of inference: what an inference trace shows in place
of its step breakdown (``templates/_phases.html.j2``).

Numbers come from the summary's ``inference`` block and from
:func:`kinetolens.analysis.inference.phases.phase_tables`; this module only
lays them out as tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from kinetolens.analysis.gputime.step_times import StepTimes
from kinetolens.analysis.inference.block import InferenceBlock, Iteration
from kinetolens.analysis.inference.phases import iterations, phase_tables
from kinetolens.analysis.workload.ops import rank_basis
from kinetolens.analysis.gputime.overview import CATEGORIES, COLUMNS, OTHER
from kinetolens.model.trace import Trace
from kinetolens.registry.kernel_names import short_names
from kinetolens.views.inference_words import iterations_title
from kinetolens.views.plot_spec import Figure

#: Kernels and ops shown per phase.
TOP_PER_PHASE = 10


def _shares(parts: Sequence[StepTimes]) -> dict[str, list[float | None]]:
    """Each busy category's share (%) of each row's total (categories at 0 everywhere left out)."""
    out: dict[str, list[float | None]] = {}
    for c in (*CATEGORIES, OTHER):
        if any(t.part(c) for t in parts):
            out[f"{c}_pct"] = [100.0 * t.part(c) / t.total if t.total else None for t in parts]
    return out


def _fields(rows: Sequence[Any], *names: str) -> dict[str, list[Any]]:
    """Columns of the typed rows' fields ``names``."""
    return {name: [getattr(r, name) for r in rows] for name in names}


def iteration_frame(block: InferenceBlock, *, basis: bool = False) -> pl.DataFrame:
    """One row per iteration: phase, time, tokens, tokens/s and breakdown (%);
    ``basis``: and how each was labelled, last (the dashboard pages every row,
    the report quotes each phase's first in :func:`labels_frame`)."""
    rows = block.iterations
    said = {"basis": [r.basis for r in rows]} if basis else {}
    counts = () if block.model_forwards else ("tokens", "requests", "tokens_per_s")  # a model forward counts none
    return pl.DataFrame(
        {
            **_fields(rows, "iteration", "phase", "dur_us", *counts),
            **_shares([r.breakdown_us for r in rows]),
            **said,
        },
        schema_overrides={c: t for c, t in _COUNT_TYPES.items() if c in ("dur_us", *counts)},
    )


_COUNT_TYPES = {"tokens": pl.Int64, "requests": pl.Int64, "dur_us": pl.Float64, "tokens_per_s": pl.Float64}


def labels_frame(block: InferenceBlock) -> pl.DataFrame:
    """How each phase was labelled: its first iteration, where the iterations
    come from, and the basis in words (every iteration's is in the JSON)."""
    first: dict[str, Iteration] = {}
    for r in block.iterations:
        first.setdefault(r.phase, r)
    return pl.DataFrame(
        {
            "phase": list(first),
            "iteration": [r.iteration for r in first.values()],
            "source": [r.source for r in first.values()],
            "labelled_from": [r.basis for r in first.values()],
        },
        schema={"phase": pl.String, "iteration": pl.Int64, "source": pl.String, "labelled_from": pl.String},
    )


def phase_frame(block: InferenceBlock) -> pl.DataFrame:
    """One row per phase: iterations, total and mean time, tokens, tokens/s, mean breakdown (%)."""
    phases = block.phases
    counts = () if block.model_forwards else ("tokens", "tokens_per_s")
    return pl.DataFrame(
        {
            **_fields(phases, "phase", "iterations", "time_us", "mean_us", *counts),
            **_shares([p.average_us for p in phases]),
        },
        schema_overrides={c: t for c, t in _COUNT_TYPES.items() if c in counts},
    )


def breakdown_rows(block: InferenceBlock) -> tuple[pl.DataFrame, list[str]]:
    """The iterations' breakdown in ns (``step`` = iteration, the step chart's input) and their labels."""
    rows = block.iterations
    frame = pl.DataFrame(
        {"step": [r.iteration for r in rows], **{c: [round(r.breakdown_us.part(c) * 1000) for r in rows] for c in COLUMNS}},
        schema={"step": pl.Int64, **{c: pl.Int64 for c in COLUMNS}},
    )
    return frame, [f"{r.iteration} {r.phase}" for r in rows]


def iteration_figure(block: InferenceBlock) -> Figure:
    """The iterations' breakdown as stacked bars, one per iteration named by its phase
    (the step breakdown chart's counterpart, in the report and the dashboard)."""
    frame, labels = breakdown_rows(block)
    from kinetolens.views import figures  # only where a chart is drawn, not for the terminal

    return figures.step_breakdown_figure(frame, f"{iterations_title(block)[:-1]} time breakdown", labels)


def per_phase_tables(
    trace: Trace, top: int = TOP_PER_PHASE, *, short: bool = True
) -> dict[str, dict[str, pl.DataFrame]]:
    """Phase -> ``{"kernels": ..., "ops": ...}``: each phase's top kernels (by GPU time)
    and ops (by the ops' ranking time), shares of that phase's time.  ``short``:
    kernels by their short names (the dashboard keeps the recorded ones and shortens them itself)."""
    its = iterations(trace)
    kernels = phase_tables(trace, its, by="kernel")
    ops = phase_tables(trace, its, by="op")
    basis = rank_basis(trace)
    out: dict[str, dict[str, pl.DataFrame]] = {}
    present = kernels if kernels.height else ops
    for phase in present["phase"].unique(maintain_order=True).to_list() if present.height else []:
        part: dict[str, pl.DataFrame] = {}
        k = kernels.filter(pl.col("phase") == phase).head(top) if kernels.height else kernels
        if k.height:
            part["kernels"] = k.select(
                kernel=short_names(k["name"]) if short else k["name"], calls="calls", device_total_us="device_total_us",
                pct_of_phase="step_share_pct", tflops_s="tflops_s", gbps="gbps",
            )  # fmt: skip
        o = ops.filter(pl.col("phase") == phase).head(top) if ops.height else ops
        if o.height:
            part["ops"] = o.select(
                op="name", calls="calls", **{basis: basis}, pct_of_phase="step_share_pct", in_shapes="in_shapes"
            )
        out[phase] = part
    return out
