"""The default thresholds of the idle and launch views
(:mod:`kinetolens.analysis.gputime.idle`, :mod:`kinetolens.analysis.gputime.launch`).
Plain constants (no polars): ``kinetolens idle -h`` and ``kinetolens launches -h``
show them as their options' defaults without loading a trace."""

from __future__ import annotations

#: Gaps shorter than this between launched work are the cost of launching (HTA's default).
KERNEL_WAIT_US = 30.0

#: A kernel is "short" when its launch call takes longer than it runs and the
#: call itself is at most this long (longer calls are blocked, not launch-bound).
SHORT_LAUNCH_US = 50.0
