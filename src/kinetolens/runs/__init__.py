"""Processing a run of many rank traces: per rank in parallel, then across ranks.

See :func:`kinetolens.runs.summaries.summarize_run` and
:mod:`kinetolens.runs.executors`.  The names load on first use, so that a
command reading one trace (which only asks :mod:`kinetolens.runs.window_choice`
whether to read it in windows) does not import the executors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetolens._lazy import lazy_names

#: Public name -> the module that defines it, imported when first asked for.
_LAZY = {
    "Executor": "kinetolens.runs.executors",
    "LocalExecutor": "kinetolens.runs.executors",
    "executor_for": "kinetolens.runs.executors",
    "rank_traces": "kinetolens.runs.summaries",
    "summarize_file": "kinetolens.runs.summaries",
    "summarize_run": "kinetolens.runs.summaries",
}

__all__ = ["Executor", "LocalExecutor", "executor_for", "rank_traces", "summarize_file", "summarize_run"]

if TYPE_CHECKING:
    from kinetolens.runs.executors import Executor, LocalExecutor, executor_for
    from kinetolens.runs.summaries import rank_traces, summarize_file, summarize_run


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
