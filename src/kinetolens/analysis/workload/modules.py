"""How many times each nn.Module ran: the one ``calls`` of a module row.

A module's ``calls`` is the number of times its forward ran, counted from
the ``nn.Module: <Name>_<n>`` frames that ``with_modules`` (or
``with_stack``) records, by module path.  It is neither the number of ops
run directly under the module (``ops`` in ``kinetolens ops --aggregate-by
module``) nor of the ops among them that carry FLOPs or bytes (``ops`` in
``kinetolens roofline --by module``): on the H100 Qwen trace the first
attention module ran once, with 29 top-level ops of which 15 carry work.
A trace without module frames gives no count (null), never a guess.
"""

from __future__ import annotations

import polars as pl

from kinetolens.model.frames import MODULE_PREFIX
from kinetolens.model.ownership import starts_in
from kinetolens.model.trace import Trace


def module_calls(trace: Trace, step: int | None = None, own: tuple[int, int] | None = None) -> pl.DataFrame:
    """``module, calls``: forward calls per module path (in ``step`` only, when
    given; those starting in ``own``, [lo, hi) ns, when given: a window's own)."""
    python = trace.python
    if python.height == 0:
        return pl.DataFrame(schema={"module": pl.String, "calls": pl.UInt32})
    frames = python.filter(pl.col("name").str.starts_with(MODULE_PREFIX)).select("module", "ts")
    if own is not None:
        frames = frames.filter(starts_in(own))
    if step is not None:
        window = trace.steps.filter(pl.col("step") == step)
        if window.height == 0:
            return pl.DataFrame(schema={"module": pl.String, "calls": pl.UInt32})
        lo, hi = int(window["ts"][0]), int(window["cpu_end"][0])
        frames = frames.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi))
    return frames.group_by("module").agg(calls=pl.len()).sort("module")


def with_module_calls(table: pl.DataFrame, trace: Trace, step: int | None = None) -> pl.DataFrame:
    """A by-module table whose ``calls`` counted ops: that count becomes
    ``ops``, and ``calls`` the module's forward calls (null where unknown),
    in the column's place."""
    return with_calls(table, module_calls(trace, step))


def with_calls(table: pl.DataFrame, counts: pl.DataFrame) -> pl.DataFrame:
    """:func:`with_module_calls` with the forward calls per module (``module, calls``) given."""
    if "module" not in table.columns or "calls" not in table.columns:
        return table
    order = [("ops" if c == "calls" else c) for c in table.columns]
    order.insert(order.index("ops"), "calls")
    return table.rename({"calls": "ops"}).join(counts, on="module", how="left").select(order)
