"""Op and kernel groups are parts that add up: a trace cut in time gives the whole trace's tables.

:func:`~kinetolens.analysis.workload.ops.op_stats` is :func:`op_groups` (or
:func:`kernel_groups`) of the whole trace finished into a table; the parts
of a trace owned by a cut in time, merged, must give the same table under
every aggregate: sums and counts add, minima and maxima take theirs, means
divide the merged sums, and labels (shapes, dtypes, direction, a kernel's
op) merge their value counts, so ``mixed (N distinct)`` and ``fprop 3,
bprop 2`` come out as for the whole.
"""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import kinetolens
from kinetolens.analysis.workload.op_groups import KERNEL_LABELS, OP_LABELS, merged
from kinetolens.analysis.workload.op_groupings import AGGREGATES, GROUPINGS
from kinetolens.analysis.workload.ops import (
    kernel_groups,
    kernel_table,
    op_groups,
    op_stats,
    op_table,
    share_whole_ns,
)
from kinetolens.model.earlier_launches import without_earlier_iteration
from tests.conftest import trace_path

TRACE = "hta/trace_diff/test/test.json.gz"  # ops in both directions, shapes, six steps


@pytest.fixture(scope="module")
def trace() -> kinetolens.Trace:
    return without_earlier_iteration(kinetolens.load(trace_path(TRACE), cache=False))


def _cuts(trace: kinetolens.Trace, n: int) -> list[tuple[int, int]]:
    """``n`` consecutive ranges covering every op's start and every kernel's launch."""
    times = pl.concat([trace.ops["ts"], trace.kernels["launch_ts"].drop_nulls(), trace.kernels["ts"]])
    lo, hi = int(times.min()), int(times.max()) + 1  # type: ignore[arg-type]
    edges = [lo + (hi - lo) * i // n for i in range(n)] + [hi]
    return list(zip(edges[:-1], edges[1:], strict=True))


def _sorted(table: pl.DataFrame) -> pl.DataFrame:
    return table.sort(table.columns, nulls_last=True)


@pytest.mark.parametrize("aggregate", AGGREGATES)
@pytest.mark.parametrize("by", ["op", "op+shape"])
def test_op_groups_of_a_cut_trace_merge_into_its_op_table(trace: kinetolens.Trace, by: str, aggregate: str) -> None:
    parts = [op_groups(trace, by=by, own=own) for own in _cuts(trace, 7)]
    assert sum(p["calls"].sum() for p in parts) == op_groups(trace, by=by)["calls"].sum()
    got = op_table(merged(parts, GROUPINGS[by], list(OP_LABELS)), by, aggregate, share_whole_ns(trace))
    expected = op_stats(trace, by=by, aggregate=aggregate)
    assert expected["direction"].str.contains(",").any()  # some groups run in both directions: their counts merged
    assert_frame_equal(_sorted(got), _sorted(expected), check_exact=False, rel_tol=1e-12)


@pytest.mark.parametrize("aggregate", AGGREGATES)
def test_kernel_groups_of_a_cut_trace_merge_into_its_kernel_table(trace: kinetolens.Trace, aggregate: str) -> None:
    parts = [kernel_groups(trace, own=own) for own in _cuts(trace, 7)]
    got = kernel_table(merged(parts, ["name"], list(KERNEL_LABELS)), aggregate, share_whole_ns(trace))
    expected = op_stats(trace, by="kernel", aggregate=aggregate)
    assert_frame_equal(_sorted(got), _sorted(expected), check_exact=False, rel_tol=1e-12)
