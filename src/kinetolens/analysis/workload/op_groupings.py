"""How an op table groups op calls (its key columns per grouping) and takes
each group's figures over its calls (:func:`kinetolens.analysis.workload.ops.op_stats`).
Plain constants (no polars): ``kinetolens ops`` offers them as its options'
choices without loading a trace."""

from __future__ import annotations

GROUPINGS = {
    "op": ["name"],
    "op+shape": ["name", "shapes"],
    "module": ["module"],
    "source": ["source"],
    "kernel": ["name"],
}
AGGREGATES = ("sum", "mean", "max", "min", "count")
