"""A memory curve is drawn with the points a chart can show, every peak kept.

df_index_resolver's memory page carried its whole curve, 2.1 MB of JSON per
answer (the dashboard's heaviest page under load); a trace with a million
allocations made a page of tens of megabytes for a chart about 1,000 px wide.
"""

from __future__ import annotations

import numpy as np
import polars as pl

import kinetolens
from kinetolens.analysis.memory.usage import memory_curve, memory_events
from kinetolens.views.figures import CURVE_BUCKETS, drawn_points, memory_figure
from tests.conftest import trace_path


def _curve(n: int) -> pl.DataFrame:
    rng = np.random.default_rng(0)
    allocated = np.cumsum(rng.integers(-1000, 1000, n)) + 10**7
    allocated[n // 3] = 10**9  # a spike one point wide
    allocated[2 * n // 3] = 10**3  # and a trough
    return pl.DataFrame({"ts": np.arange(n) * 1000, "device": ["GPU0"] * n, "allocated": allocated,
                         "reserved": allocated + 5000, "op": ["aten::mm"] * n})  # fmt: skip


def test_a_long_curve_keeps_its_peaks_troughs_and_ends_in_few_points() -> None:
    curve = _curve(200_000)
    drawn = drawn_points(curve)
    assert drawn.height <= 6 * CURVE_BUCKETS
    for col in ("allocated", "reserved"):
        assert drawn[col].max() == curve[col].max() and drawn[col].min() == curve[col].min()
    assert drawn["ts"][0] == curve["ts"][0] and drawn["ts"][-1] == curve["ts"][-1]
    assert drawn["ts"].is_sorted()
    fig = memory_figure(curve)
    assert len(fig["data"][0]["x"]) == drawn.height
    assert max(fig["data"][0]["y"]) == curve["allocated"].max() / 2**20  # MiB: the spike is drawn at its height


def test_a_short_curve_is_drawn_whole() -> None:
    curve = _curve(4 * CURVE_BUCKETS)
    assert drawn_points(curve).equals(curve)


def test_a_real_curve_keeps_its_peak() -> None:
    trace = kinetolens.load(trace_path("hta/df_index_resolver/df_index_resolver.json.gz"))
    curve = memory_curve(memory_events(trace))
    for (device,), part in curve.sort("ts").group_by("device"):
        drawn = drawn_points(part)
        assert drawn.height <= min(part.height, 6 * CURVE_BUCKETS), device
        assert drawn["allocated"].max() == part["allocated"].max(), device
