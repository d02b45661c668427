"""Which part of a trace owns an event, when a trace is read in parts.

A trace read a step window at a time (:mod:`kinetolens.windowed`) gives
each window the time from its step's start to the next step's; sums over
the windows count an event in the window that owns it: a host event by its
start, a GPU activity by its launch (the op and forward op that name it are
there, and its op's other kernels too).  Either way each event counts once.
"""

from __future__ import annotations

import polars as pl

__all__ = ["owned_kernels", "starts_in"]


def starts_in(own: tuple[int, int], start: str = "ts") -> pl.Expr:
    """Rows (starting at column ``start``) starting in ``own`` ([lo, hi) ns): the host events a part owns."""
    return (pl.col(start) >= own[0]) & (pl.col(start) < own[1])


def owned_kernels(lo: int, hi: int) -> pl.Expr:
    """The GPU activities a part of a trace owns: those launched in ``[lo, hi)``
    (ns), and those whose launch is not recorded that started then."""
    at = pl.coalesce(pl.col("launch_ts"), pl.col("ts"))
    return (at >= lo) & (at < hi)
