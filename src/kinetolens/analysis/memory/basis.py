"""What a memory peak counts: everything alive on the device, or only what
was allocated while profiling; and the words every view says beside it."""

from __future__ import annotations

#: ``allocated`` is everything alive on the device (its allocator's totals).
ALLOCATOR = "allocator"
#: ``allocated`` counts only memory allocated inside the profiling window.
WINDOW_SUM = "window_sum"

#: What a peak of each basis leaves out, said next to the number in every view.
BASIS_NOTES = {
    ALLOCATOR: "everything alive on the device",
    WINDOW_SUM: "allocated while profiling only: weights, optimizer state and data allocated before are not counted",
}
