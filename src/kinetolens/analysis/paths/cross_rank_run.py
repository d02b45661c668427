"""A run's cross-rank critical paths over its steps, summed up once for every view.

:func:`kinetolens.analysis.paths.cross_rank_path.cross_rank_path` gives one step;
``kinetolens critical-path RUNDIR``, the report and the dashboard show all
of a run's steps together: what bounds the path, which ranks hold it, the
collectives on it and the rank each waited for.  They all read
:class:`RunPath`, so they cannot disagree.

A run of a thousand ranks cannot list them all: path time per rank keeps
the ranks holding most of the path over all steps and one row for the
others (``rank`` null, ``ranks`` how many ranks it stands for), the same
ranks in every step so that a rank reads the same across steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kinetolens.analysis.paths.critical_path import summarize
from kinetolens.analysis.paths.cross_rank_path import CrossRankPath, by_rank, combined, top_work

#: Ranks shown by name in the path time per rank; the rest are one row.
TOP_RANKS = 8

_RANKS = {"rank": pl.Int64, "ranks": pl.UInt32, "us": pl.Float64, "pct": pl.Float64}
_GATES = {"step": pl.Int64, "collective": pl.String, "kind": pl.String, "seq": pl.Int64, "gate_rank": pl.Int64, "held_ms": pl.Float64}


@dataclass
class RunPath:
    """Every step's cross-rank path of a run, and the tables over them."""

    paths: list[CrossRankPath]
    #: All steps' path edges (:func:`~kinetolens.analysis.paths.cross_rank_path.combined`), with ``step``.
    path: pl.DataFrame
    #: The steps' path lengths together (us).
    length_us: float
    #: The slowest rank's wall time of each step, together (us).
    slowest_us: float
    #: ``step``, ``length_us``, ``slowest_step_us``, ``gate_rank``, ``verdict``: one row per step.
    steps: pl.DataFrame
    #: ``bound_by``, ``us``, ``pct``, ``edges``: what bounds the path, all steps together
    #: (0 ns ordering edges left out, as for one rank).
    summary: pl.DataFrame
    #: ``step``, ``bound_by``, ``us``, ``pct`` (of that step's path).
    split: pl.DataFrame
    #: ``rank`` (null: the others), ``ranks`` (how many ranks the row stands for), ``us``, ``pct``:
    #: the top ranks first, largest first, the others last.
    ranks: pl.DataFrame
    #: As :attr:`ranks`, per ``step`` (the same top ranks in every step).
    rank_steps: pl.DataFrame
    #: The collectives on the path: ``step``, ``collective``, ``kind``, ``seq``,
    #: ``gate_rank`` (the rank the call waited for), ``held_ms``.
    gates: pl.DataFrame
    #: The largest work on the path: ``rank``, ``name``, ``bound_by``, ``us``, ``pct``.
    work: pl.DataFrame

    @property
    def verdicts(self) -> list[str]:
        return [cp.verdict for cp in self.paths]


def path_bounds(path: pl.DataFrame, length_us: float) -> pl.DataFrame:
    """What bounds ``path`` (``bound_by``, ``us``, ``pct``, ``edges``), ordering edges left out."""
    if path.height == 0:
        return pl.DataFrame(schema={"bound_by": pl.String, "us": pl.Float64, "pct": pl.Float64, "edges": pl.UInt32})
    return summarize(path.filter(pl.col("bound_by") != "dependency"), length_us)


def _top_ranks(path: pl.DataFrame, length_us: float, top: int) -> list[int]:
    """The ranks named in the rank tables: all of them when at most one more than ``top``
    (a row of "1 other rank" says less than that rank's own row)."""
    ranks = by_rank(path, length_us)["rank"].to_list() if path.height else []
    return ranks if len(ranks) <= top + 1 else ranks[:top]


def _ranks(path: pl.DataFrame, keep: list[int], by: list[str], lengths: pl.DataFrame | float) -> pl.DataFrame:
    """Path time per kept rank and one row for the others, per ``by`` group."""
    if path.height == 0:
        return pl.DataFrame(schema={**{b: pl.Int64 for b in by}, **_RANKS})
    shown = pl.when(pl.col("rank").is_in(keep)).then(pl.col("rank")).otherwise(pl.lit(None, pl.Int64))
    out = path.group_by(*by, shown.alias("shown")).agg(ranks=pl.col("rank").n_unique(), us=pl.col("us").sum())
    if isinstance(lengths, pl.DataFrame):
        out = out.join(lengths, on=by, how="left")
    else:
        out = out.with_columns(length=pl.lit(lengths, pl.Float64))
    return (
        out.with_columns(pct=pl.when(pl.col("length") > 0).then(100 * pl.col("us") / pl.col("length")).otherwise(0.0))
        .sort(*by, pl.col("shown").is_null(), "us", "shown", descending=[False] * len(by) + [False, True, False])
        .select(*by, rank="shown", ranks="ranks", us="us", pct="pct")
        .cast({**{b: pl.Int64 for b in by}, **_RANKS})  # type: ignore[arg-type]
    )


def run_path(paths: list[CrossRankPath], top_ranks: int = TOP_RANKS, top: int = 10) -> RunPath:
    """The run's tables over ``paths`` (one per step, from :func:`kinetolens.runs.graphs.run_paths`)."""
    path, length = combined(paths)
    keep = _top_ranks(path, length, top_ranks)
    lengths = pl.DataFrame({"step": [cp.step for cp in paths], "length": [cp.length_us for cp in paths]}, schema={"step": pl.Int64, "length": pl.Float64})
    steps = pl.DataFrame(
        {
            "step": [cp.step for cp in paths],
            "length_us": [cp.length_us for cp in paths],
            "slowest_step_us": [cp.slowest_step_us for cp in paths],
            "gate_rank": [cp.gate_rank for cp in paths],
            "verdict": [cp.verdict for cp in paths],
        },
        schema={"step": pl.Int64, "length_us": pl.Float64, "slowest_step_us": pl.Float64, "gate_rank": pl.Int64, "verdict": pl.String},
    )
    split = [cp.summary.select(step=pl.lit(cp.step, pl.Int64), bound_by="bound_by", us="us", pct="pct") for cp in paths if cp.summary.height]
    gates = [cp.gates.with_columns(step=pl.lit(cp.step, pl.Int64)) for cp in paths if cp.gates.height]
    return RunPath(
        paths=paths,
        path=path,
        length_us=length,
        slowest_us=sum(cp.slowest_step_us for cp in paths),
        steps=steps,
        summary=path_bounds(path, length),
        split=pl.concat(split) if split else pl.DataFrame(schema={"step": pl.Int64, "bound_by": pl.String, "us": pl.Float64, "pct": pl.Float64}),
        ranks=_ranks(path, keep, [], length),
        rank_steps=_ranks(path, keep, ["step"], lengths),
        gates=pl.concat(gates).select(list(_GATES)).cast(_GATES) if gates else pl.DataFrame(schema=_GATES),  # type: ignore[arg-type]
        work=top_work(path, length, top) if path.height else pl.DataFrame(),
    )
