"""Which steps the costly per-step analyses take on a long trace, and the words for it.

The what-if behind the recommendations re-times at most :data:`SAMPLE_STEPS`
steps and at most one in :data:`SAMPLE_SHARE` (:func:`sample_size`); the
critical path section of the report and the dashboard traces at most
:data:`SAMPLE_STEPS`; both spread over the trace (:func:`sample`).
Re-timing a step costs about as much as loading it did (more on a long
trace, whose load costs less a step), so covering every step, or most
steps of a short trace, would double the cost of the first answer;
``kinetolens whatif`` re-times every step.  Plain constants and pure
functions (no polars): the terminal says what was sampled from a cached
summary without importing the simulator."""

from __future__ import annotations

#: Steps the recommendations' what-if simulates at most (spread over the
#: trace): their savings are means over steps, and re-timing every step of a
#: long trace cost more than everything else the summary does.
SAMPLE_STEPS = 8
#: ... and at most one step in this many (at least one step): a trace of up
#: to 15 steps is re-timed on its middle step, one of 64 steps or more on 8;
#: the what-if then costs about a sixth of the load from 8 steps up
#: (re-timing a step costs 1-1.6x loading it, docs/whatif.md).
SAMPLE_SHARE = 8
#: ... and at least, before it may stop early: the middle step and both ends
#: (two steps that agree by chance would stop it with an outlying last step unseen).
MIN_STEPS = 3
#: It stops once every change's mean effect per step is known this well: its
#: standard error over the steps re-timed so far, as a share of the mean step.
SETTLED_SHARE = 0.01
#: How a sample of several steps is taken, in words.
SAMPLING = (
    f"one step in {SAMPLE_SHARE}, at most {SAMPLE_STEPS}, spread over the trace; "
    f"fewer once each saving's standard error fell under {SETTLED_SHARE:.0%} of the step"
)


def sample(n: int, k: int | None) -> list[int]:
    """Positions of ``k`` of ``n`` items, evenly spaced, first and last included (all when ``k`` is None or >= n)."""
    if k is None or n <= k:
        return list(range(n))
    if k <= 1:
        return [n // 2] if k == 1 else []
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def sample_size(n: int, at_most: int = SAMPLE_STEPS, share: int | None = SAMPLE_SHARE) -> int:
    """How many of ``n`` steps the recommendations' what-if re-times at most:
    ``at_most``, and one in ``share`` of them (at least one; None: no share)."""
    if n == 0:
        return 0
    return min(at_most, max(1, n // share)) if share else min(at_most, n)


def sampled_label(k: int, n: int) -> str:
    """A sample's label, as results and the summary's JSON carry it: ``"3 of 60 steps"``."""
    return f"{k} of {n} steps"


def sample_in_words(label: str) -> str:
    """A :func:`sampled_label` in words (the first screen and each estimate say it)."""
    k, _, n = label.removesuffix(" steps").partition(" of ")
    if k == "1":
        return f"the middle one of {n} steps (one step in {SAMPLE_SHARE} at most; kinetolens whatif takes every step)"
    return f"{label} ({SAMPLING})"
