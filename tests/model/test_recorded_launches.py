"""``attribution.op_of_recorded_launches`` is over kernels whose launch the file holds."""

from __future__ import annotations

import polars as pl
import pytest

from kinetolens import load
from kinetolens.analysis.summary import attribution
from tests.conftest import trace_path


def test_op_of_recorded_launches_counts_only_kernels_whose_launch_is_in_the_file() -> None:
    # 546 of this trace's kernels carry an External id but their launch call
    # is not in the file; they used to count as "recorded" (and unattributed).
    trace = load(trace_path("hta/trace_diff/test/test.json.gz"))
    kernels = trace.kernels.filter(pl.col("kind") == "kernel")
    unrecorded = kernels.filter(pl.col("launch_id").is_null() & (pl.col("external_id").fill_null(0) != 0))
    assert unrecorded.height > 0
    recorded = kernels.filter(pl.col("launch_id").is_not_null())
    expected = recorded.filter(pl.col("op_id").is_not_null())["dur"].sum() / recorded["dur"].sum()
    assert attribution(trace).op_of_recorded_launches == pytest.approx(expected)
    assert expected == pytest.approx(1.0)
