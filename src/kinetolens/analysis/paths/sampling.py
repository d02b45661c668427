"""Which steps the costly per-step analyses take on a long trace, and the words for it.

The what-if behind the recommendations re-times at most :data:`SAMPLE_STEPS`
steps and the report's critical path section traces at most as many, spread
over the trace (:func:`sample`): each costs about half as much per step as
loading the step, so covering every step of a long trace would double the
cost of the first answer.  Plain constants and a pure function (no polars):
the terminal says what was sampled from a cached summary without importing
the simulator."""

from __future__ import annotations

#: Steps the recommendations' what-if simulates at most (spread over the
#: trace): their savings are means over steps, and re-timing every step of a
#: long trace cost more than everything else the summary does.
SAMPLE_STEPS = 8
#: ... and at least, before it may stop early: the middle step and both ends
#: (two steps that agree by chance would stop it with an outlying last step unseen).
MIN_STEPS = 3
#: It stops once every change's mean effect per step is known this well: its
#: standard error over the steps re-timed so far, as a share of the mean step.
SETTLED_SHARE = 0.01
#: How the sample is taken, in words (the summary's first screen and the estimates say it).
SAMPLING = f"spread over the trace; stopped when each saving's standard error fell under {SETTLED_SHARE:.0%} of the step"


def sample(n: int, k: int | None) -> list[int]:
    """Positions of ``k`` of ``n`` items, evenly spaced, first and last included (all when ``k`` is None or >= n)."""
    if k is None or n <= k:
        return list(range(n))
    if k <= 1:
        return [n // 2] if k == 1 else []
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})
