"""Whether the GPU's clock agrees with the host's.

A launch call reaches the GPU in microseconds, so a kernel starting before
its launch, or every kernel starting milliseconds after its launch, says
the two clocks disagree (graph replays on some ROCm builds record GPU
times offset from the CPU's).  Figures that compare host and GPU times
(idle after a synchronization, launch delay, the critical path's launch
edges) are artefacts then; each analysis asks here, so none builds a
saving on the offset.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kinetolens.model.trace import Trace

#: The quickest launch-to-start this long (ns) means an offset, not a slow launch.
OFFSET_NS = 1_000_000
#: ... over at least this many launched activities (one kernel may really have waited that long).
EVIDENCE = 5


@dataclass(frozen=True)
class ClockOffset:
    """The GPU clock runs at least ``offset_ns`` behind the host's (every launched activity starts that late)."""

    offset_ns: int
    activities: int

    def sentence(self) -> str:
        return (
            f"every GPU activity starts at least {self.offset_ns / 1e6:,.1f} ms after its launch: the GPU clock "
            "looks offset from the CPU clock, so host-GPU gaps (launch delay, idle after a synchronization) "
            "are overstated by about that much"
        )


def clock_offset_of(starts: pl.Series, launches: pl.Series) -> ClockOffset | None:
    """The rule, on GPU activities' start times and their launch calls' (ns; nulls: not launched)."""
    delays = (starts - launches).drop_nulls()
    if delays.len() < EVIDENCE:
        return None
    quickest = delays.min()
    if quickest is None or quickest <= OFFSET_NS:  # type: ignore[operator]
        return None
    return ClockOffset(offset_ns=int(quickest), activities=delays.len())  # type: ignore[arg-type]


def gpu_clock_offset(trace: Trace, window: tuple[int, int] | None = None) -> ClockOffset | None:
    """The offset the activities launched inside ``window`` ([start, end) ns, if given) show, or None."""
    # Two columns, filtered as Series: neither the wide kernel table copied
    # nor a query run (a critical path's fixed cost is its queries).
    ts, launch_ts = trace.kernels["ts"], trace.kernels["launch_ts"]
    keep = launch_ts.is_not_null()
    if window is not None:
        keep = keep & (launch_ts >= window[0]) & (launch_ts < window[1])
    return clock_offset_of(ts.filter(keep), launch_ts.filter(keep))
