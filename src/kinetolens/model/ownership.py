"""Which part of a trace owns an event, when a trace is read in parts.

A trace read a step window at a time (:mod:`kinetolens.windowed`) gives
each window the time from its step's start to the next step's; sums over
the windows count an event in the window that owns it: a host event by its
start, a GPU activity by its launch (the op and forward op that name it are
there, and its op's other kernels too).  Either way each event counts once.
"""

from __future__ import annotations

import polars as pl

__all__ = ["PART_IDS", "owned_kernels", "starts_in", "unique_in_trace"]

#: Ids a part may use: an id a part numbers itself (an op's, a launch's) is
#: made unique in the whole trace by adding the part's number times this.
PART_IDS = 2**32


def starts_in(own: tuple[int, int], start: str = "ts") -> pl.Expr:
    """Rows (starting at column ``start``) starting in ``own`` ([lo, hi) ns): the host events a part owns."""
    return (pl.col(start) >= own[0]) & (pl.col(start) < own[1])


def owned_kernels(lo: int, hi: int) -> pl.Expr:
    """The GPU activities a part of a trace owns: those launched in ``[lo, hi)``
    (ns), and those whose launch is not recorded that started then."""
    at = pl.coalesce(pl.col("launch_ts"), pl.col("ts"))
    return (at >= lo) & (at < hi)


def unique_in_trace(column: str, part: int) -> pl.Expr:
    """``column`` (ids the ``part``-th part numbered itself) made unique in the whole trace (:data:`PART_IDS`)."""
    return pl.col(column) + part * PART_IDS
