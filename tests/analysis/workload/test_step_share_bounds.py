"""Shares of step time stay within 100% when one trace holds several GPUs."""

from __future__ import annotations

import polars as pl

import kinetolens
from kinetolens.analysis.workload.ops import gpus_at_work, op_stats, step_time_ns

from tests.conftest import trace_path


def test_two_gpu_export_shares_at_most_100_pct() -> None:
    # nsys-ai's FastVideo export: two H100s each copy for 530 ms in a 969 ms
    # window; summed against one window aten::copy_ read 109.4% of the step.
    trace = kinetolens.load(trace_path("nsys/nsys-ai_h100_2gpu_1s.sqlite"))
    assert gpus_at_work(trace) == 2
    stats = op_stats(trace)
    assert stats["step_share_pct"].max() <= 100.0
    assert stats["step_share_pct"].sum() <= 100.0
    copy = stats.filter(pl.col("name") == "aten::copy_")
    expected = copy["device_self_us"][0] * 1e3 / step_time_ns(trace) * 100.0
    assert copy["step_share_pct"][0] == expected and 50.0 < expected < 60.0
