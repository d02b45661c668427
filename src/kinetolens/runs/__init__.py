"""Processing a run of many rank traces: per rank in parallel, then across ranks.

See :func:`kinetolens.runs.summaries.summarize_run` and
:mod:`kinetolens.runs.executors`.
"""

from kinetolens.runs.executors import Executor, LocalExecutor, executor_for
from kinetolens.runs.summaries import rank_traces, summarize_file, summarize_run

__all__ = [
    "Executor",
    "LocalExecutor",
    "executor_for",
    "rank_traces",
    "summarize_file",
    "summarize_run",
]
