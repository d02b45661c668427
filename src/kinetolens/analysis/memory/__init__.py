"""Memory over time: the allocation curve, peaks, leaks and per-op usage."""
