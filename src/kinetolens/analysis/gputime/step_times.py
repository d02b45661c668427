"""A step's (or an engine iteration's) time per breakdown category, as a typed value.

The categories are :data:`kinetolens.model.vocabulary.STEP_COLUMNS`
(busy categories in priority order, ``other``, ``total``), in microseconds;
the summary, the report and the dashboard read these fields, never a dict
keyed by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from kinetolens.model.vocabulary import STEP_COLUMNS


@dataclass(frozen=True, kw_only=True)
class StepTimes:
    """Microseconds per category; the categories add up to ``total``."""

    kernel: float
    memcpy: float
    memset: float
    communication: float
    runtime: float
    dataloader: float
    cpu_exec: float
    other: float
    total: float

    def part(self, category: str) -> float:
        """The time of ``category`` (one of ``STEP_COLUMNS``)."""
        return float(getattr(self, category))

    @classmethod
    def from_ns(cls, row: Mapping[str, Any]) -> StepTimes:
        """From a breakdown row in nanoseconds (a null category is 0)."""
        return cls(**{name: float(row[name] or 0) / 1000.0 for name in STEP_COLUMNS})


@dataclass(frozen=True, kw_only=True)
class StepRow(StepTimes):
    """One step's breakdown: its id (null for a trace without steps) and
    whether it ran whole (a last step cut short counts in no mean)."""

    step: int | None
    complete: bool


# The fields are the breakdown's columns, in order: a category added to one
# and not the other is an error at import, not a silently missing figure.
if tuple(f.name for f in fields(StepTimes)) != STEP_COLUMNS:
    raise TypeError(f"StepTimes fields differ from the breakdown columns {STEP_COLUMNS}")
