"""The step breakdown's sweep against the rule it implements, instant by
instant, on random intervals and windows (overlapping, empty and sharing a
start), and the working memory it needs on a real trace."""

from __future__ import annotations

import tracemalloc

import numpy as np
import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.gputime import overview
from tests.conftest import trace_path

OTHER = len(overview.CATEGORIES)


def _by_instant(intervals: list[tuple[int, int, int]], windows: list[tuple[int, int]]) -> np.ndarray:
    """Each nanosecond given to the first busy category, in the window that
    starts last at or before it (windows with nothing in them left out) if
    it ends after it."""
    out = np.zeros((len(windows), OTHER + 1), dtype=np.int64)
    kept = sorted((s, i) for i, (s, e) in enumerate(windows) if e > s)
    for x in range(0, 300):  # past every end
        owners = [i for s, i in kept if s <= x]
        if not owners:
            continue
        w = owners[-1]
        if x >= windows[w][1]:
            continue
        busy = [c for c, s, e in intervals if s <= x < e]
        out[w, min(busy) if busy else OTHER] += 1
    return out


@pytest.mark.parametrize("chunk", [overview.SWEEP_CHUNK, 3])
@pytest.mark.parametrize("seed", range(40))
def test_sweep_gives_each_instant_to_the_first_busy_category(seed: int, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # chunk 3: the windows swept a few at a time, each run with the intervals that overlap it
    monkeypatch.setattr(overview, "SWEEP_CHUNK", chunk)
    rng = np.random.default_rng(seed)
    intervals = []
    for _ in range(int(rng.integers(0, 30))):
        s = int(rng.integers(0, 190))
        intervals.append((int(rng.integers(0, OTHER)), s, s + int(rng.integers(1, 40))))
    windows = []
    for _ in range(int(rng.integers(1, 6))):
        s = int(rng.integers(0, 180)) if rng.random() > 0.2 or not windows else windows[-1][0]  # some share a start
        windows.append((s, s + int(rng.integers(0, 60))))  # some are empty
    frame = pl.DataFrame(
        {"cat": [c for c, _, _ in intervals], "start": [s for _, s, _ in intervals], "end": [e for _, _, e in intervals]},
        schema={"cat": pl.Int8, "start": pl.Int64, "end": pl.Int64},
    )
    win = pl.DataFrame({"step": list(range(len(windows))), "start": [s for s, _ in windows], "end": [e for _, e in windows]},
                       schema={"step": pl.Int64, "start": pl.Int64, "end": pl.Int64})  # fmt: skip
    table = overview.breakdown(frame, win)
    got = table.select(*overview.CATEGORIES, "other").to_numpy()
    assert np.array_equal(got, _by_instant(intervals, windows))
    assert table["total"].to_list() == [e - s for s, e in windows]


def test_sweep_needs_a_few_arrays_of_end_points() -> None:
    # About four 8-byte arrays of end points at once (the sorted times, their
    # order, the segments and a running sum): a sweep that keeps a running
    # count per category, or every segment's window index beside the
    # segments, needs twice that.
    trace = kinetolens.load(trace_path("hta/df_index_resolver/df_index_resolver.json.gz"))
    intervals, windows = overview.category_intervals(trace), overview.step_windows(trace)
    points = 2 * intervals.height
    tracemalloc.start()
    try:
        overview._sweep(intervals, windows)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert points > 100_000
    assert peak < 40 * points, f"{peak / points:.1f} bytes per end point"
