"""What-if across ranks: re-time a joined step (:class:`~kinetolens.analysis.paths.cross_rank_path.JoinedGraph`).

``rank:N=median``: rank N's own work in the step is scaled down so that its
longest chain takes what the other ranks' median takes.  A rank's own
chain is the longest path through its edges alone (its ops, launches,
kernels, and the transfer time of the collectives it takes part in), as if
every other rank were infinitely fast; the transfer part is not scaled.
``category:C=F`` scales every rank's edges of that bound (``data_loading``,
``gpu_compute``, ...).

The step time is predicted as the slowest rank's measured step less what
the joined path got shorter by: time the graph does not explain (Python
between ops, waits on untraced things) is left as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kinetolens.analysis.paths.cross_rank_path import BOUNDS, CrossRankPath, JoinedGraph, cross_rank_path
from kinetolens.analysis.paths.longest_path import longest_path
from kinetolens.analysis.paths.whatif import BadChange, Change

#: The changes a joined step supports.
RUN_CHANGES = ("rank", "category")


@dataclass
class RunStepPrediction:
    step: int
    #: The slowest rank's measured step (us).
    measured_us: float
    predicted_us: float
    before: CrossRankPath
    after: CrossRankPath
    #: Per rank scaled: ``rank``, ``own_us`` (its own chain), ``new_us`` (after), ``median_us`` (the others' median), ``factor``.
    scaled: pl.DataFrame


def rank_chains(graph: JoinedGraph, weight: np.ndarray | None = None) -> pl.DataFrame:
    """Per rank: its own longest chain (``own_us``) and the share of it that
    is collective transfer (``transfer_us``), each rank's edges taken alone."""
    w = graph.weight if weight is None else weight
    order = np.argsort(graph.rank, kind="stable")
    ranks, starts = np.unique(graph.rank[order], return_index=True)
    ends = np.append(starts[1:], order.size)
    rows = []
    for r, a, b in zip(ranks.tolist(), starts.tolist(), ends.tolist(), strict=True):
        idx = order[a:b]
        nodes, inverse = np.unique(np.concatenate([graph.src[idx], graph.dst[idx]]), return_inverse=True)
        src, dst = inverse[: idx.size], inverse[idx.size :]
        path = longest_path(src, dst, w[idx], nodes.size, ties="lowest")
        if len(path) < 2:
            rows.append({"rank": r, "own_us": 0.0, "transfer_us": 0.0})
            continue
        key = src.astype(np.int64) * nodes.size + dst
        p = np.asarray(path, dtype=np.int64)
        want = p[:-1] * nodes.size + p[1:]
        by_key = np.lexsort((-w[idx], key))
        on = idx[by_key[np.searchsorted(key[by_key], want)]]
        rows.append({"rank": r, "own_us": float(w[on].sum()) / 1000, "transfer_us": float(w[on][graph.join[on]].sum()) / 1000})
    return pl.DataFrame(rows, schema={"rank": pl.Int64, "own_us": pl.Float64, "transfer_us": pl.Float64})


def _others_median(chains: pl.DataFrame, rank: int) -> float:
    others = chains.filter(pl.col("rank") != rank)["own_us"]
    return float(others.median()) if others.len() else 0.0  # type: ignore[arg-type]


def whatif_run(graph: JoinedGraph, changes: list[Change]) -> RunStepPrediction:
    """The joined step re-timed with ``changes``."""
    weight = graph.weight.copy()
    scaled = []
    chains = None
    for change in changes:
        if change.kind == "category":
            mask = (graph.bound == BOUNDS.index(str(change.target))) & ~graph.join
            weight[mask] = np.rint(weight[mask] * float(change.factor or 0.0)).astype(np.int64)
        elif change.kind == "rank":
            r = int(str(change.target))
            if r not in graph.rank_offset:
                have = ", ".join(map(str, graph.ranks[:8])) + (", ..." if len(graph.ranks) > 8 else "")
                raise BadChange(f"{change.spec!r}: step {graph.step} has no rank {r} (ranks: {have})")
            chains = rank_chains(graph, weight)
            row = chains.filter(pl.col("rank") == r).row(0, named=True)
            median = _others_median(chains, r)
            work = row["own_us"] - row["transfer_us"]
            factor = min(1.0, max(0.0, median - row["transfer_us"]) / work) if work > 0 else 1.0
            mask = graph.rank_edges(r)
            weight[mask] = np.rint(weight[mask] * factor).astype(np.int64)
            new = row["transfer_us"] + work * factor if work > 0 else row["own_us"]
            scaled.append({"rank": r, "own_us": row["own_us"], "new_us": new, "median_us": median, "factor": factor})
        else:
            raise BadChange(f"{change.spec!r}: with a run directory, use rank:N=median or category:C=F")
    before = cross_rank_path(graph)
    after = cross_rank_path(graph, weight)
    measured = before.slowest_step_us
    predicted = max(0.0, measured - (before.length_us - after.length_us))
    return RunStepPrediction(
        step=graph.step, measured_us=measured, predicted_us=predicted, before=before, after=after,
        scaled=pl.DataFrame(scaled, schema={"rank": pl.Int64, "own_us": pl.Float64, "new_us": pl.Float64, "median_us": pl.Float64, "factor": pl.Float64}),
    )  # fmt: skip


@dataclass(frozen=True)
class RunWhatIf:
    """A run's steps re-timed with the same changes, and their mean: what ``whatif RUNDIR`` shows."""

    ranks: int
    changes: tuple[str, ...]
    steps: tuple[RunStepPrediction, ...]

    @property
    def measured_us(self) -> float:
        """The mean over the steps of the slowest rank's measured step."""
        return sum(p.measured_us for p in self.steps) / len(self.steps)

    @property
    def predicted_us(self) -> float:
        return sum(p.predicted_us for p in self.steps) / len(self.steps)

    @property
    def delta_us(self) -> float:
        return self.predicted_us - self.measured_us

    @property
    def delta_pct(self) -> float | None:
        return 100 * self.delta_us / self.measured_us if self.measured_us else None

    def to_json(self, run: str) -> dict[str, object]:
        return {
            "run": run,
            "ranks": self.ranks,
            "changes": list(self.changes),
            "measured_us": self.measured_us,
            "predicted_us": self.predicted_us,
            "delta_us": self.delta_us,
            "delta_pct": self.delta_pct,
            "steps": [
                {
                    "step": p.step, "measured_us": p.measured_us, "predicted_us": p.predicted_us,
                    "length_us": p.before.length_us, "new_length_us": p.after.length_us,
                    "verdict": p.before.verdict, "new_verdict": p.after.verdict,
                    "scaled": p.scaled.to_dicts(), "summary": p.after.summary.to_dicts(),
                }  # fmt: skip
                for p in self.steps
            ],
        }
