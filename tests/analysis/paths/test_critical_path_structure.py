"""The critical path's fixed cost per call: fast and bounded.

On HTA's tiny critical-path traces (54 to 418 nodes) a call's time is its
fixed cost, and that is the number of polars queries it runs: each costs tens
of microseconds to a millisecond (a first join, sort or group-by in a
process) whatever its size.  The graph used to take about 120 of them; its
edges are now built on numpy arrays, a window's events are rows picked from
whole-trace tables kept with the trace (``TraceFacts.of``), and the
whole-trace lookups (launches, event records, cuda_sync records) are numpy
over one query of the runtime table.  The machine these tests run on is shared and loaded, so the count of
queries is asserted, not milliseconds (``docs/BENCHMARKS.md`` has the times).
Queries are counted with a profiling hook (``sys.setprofile``) on polars'
``collect``, through which every eager and lazy polars operation runs.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from kinetolens import load
from kinetolens.analysis.paths.critical_path import annotation_window, critical_path
from tests.conftest import trace_path

PARAM = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
CASES = {
    "alexnet": ("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", PARAM, 1),
    "simple_add": ("hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz", PARAM, 1),
    "cuda_event_sync": ("hta/critical_path/cuda_event_sync/event_sync_trace.json.gz", "ProfilerStep", 0),
}
#: Queries a first call may run (it ran 124 on cuda_event_sync at first, then 18, 10 now).
MAX_QUERIES = 12


def _queries(fn: Any) -> int:
    """How many polars queries ``fn()`` runs."""
    count = 0

    def hook(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "c_call" and getattr(arg, "__name__", "") == "collect" and type(getattr(arg, "__self__", None)).__name__ == "PyLazyFrame":
            count += 1

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_small_window_runs_a_few_queries(case: str) -> None:
    # the ~12 ms fixed cost per call, cut (the target: >= 10x faster than HTA on every shared trace)
    rel, annotation, instance = CASES[case]
    trace = load(trace_path(rel), cache=False)
    window = annotation_window(trace, annotation, instance)
    assert _queries(lambda: None) == 0
    n = _queries(lambda: critical_path(trace, window))
    assert 0 < n <= MAX_QUERIES, f"{case}: {n} polars queries per call"


#: Queries a later window of the same trace may run (4 now): the whole-trace tables are kept with the trace.
MAX_LATER_QUERIES = 5


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_later_window_reuses_the_trace_wide_tables(case: str) -> None:
    # the trace-wide lookups are made once per trace, not once per call
    rel, annotation, instance = CASES[case]
    trace = load(trace_path(rel), cache=False)
    window = annotation_window(trace, annotation, instance)
    first = critical_path(trace, window)
    n = _queries(lambda: critical_path(trace, window))
    assert 0 < n <= MAX_LATER_QUERIES, f"{case}: {n} polars queries on a later call"
    again = critical_path(trace, window)
    assert again.path.equals(first.path) and again.length_us == first.length_us
