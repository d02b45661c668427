"""Processing a run of many rank traces: per rank in parallel, then across ranks.

See :func:`kinetolens.runs.summaries.summarize_run` and
:mod:`kinetolens.runs.executors`.  The names load on first use, so that a
command reading one trace (which only asks :mod:`kinetolens.runs.window_choice`
whether to read it in windows) does not import the executors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kinetolens.runs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names only."""
    return list(__all__)
