"""How many steps the what-if behind the recommendations re-times, and the words for it.

Plain constants (no polars): the terminal says what was sampled from a cached
summary without importing the simulator."""

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
