"""Which frames are the user's code, what source an op is given, and
nn.Module names.

Two kinds of source, told apart by their form:

* ``file:line``: the line that made the call leading to the op.  From a
  Kineto ``Call stack`` arg (kinetolens capture writes one from torch's
  tracer, see ``kinetolens.capture.call_sites``; torch < 2 wrote them too)
  or an NVTX marker's call site.
* ``in func (file:line)``: only the enclosing user function is known.  A
  ``python_function`` frame is named by the line where its function was
  *entered* (its ``def``, or where profiling began for frames already
  running), never the line that ran the op, so that line is shown as the
  function's place, not as the op's call site.

Which files are the user's is ``kinetolens.user_code``'s rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

import polars as pl

from kinetolens.formats import MODULE_RANGE_PREFIX
from kinetolens.user_code import INTERNAL_PATH_PARTS, is_user_file

__all__ = ["FUNCTION_ONLY_PREFIX", "INTERNAL_PATH_PARTS", "MODULE_PREFIX", "enclosing_function", "per_distinct", "source_from_call_stack", "user_frame"]

MODULE_PREFIX = MODULE_RANGE_PREFIX
#: A source that names only the enclosing function starts with this.
FUNCTION_ONLY_PREFIX = "in "

_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")


def _user_match(name: str) -> re.Match[str] | None:
    match = _FRAME.match(name)
    if match is None or not is_user_file(match["file"]):
        return None
    return match


@lru_cache(maxsize=1 << 16)
def user_frame(name: str) -> str | None:
    """``file:line`` when ``name`` (``file(line): func``) is a frame of user
    code, else None.

    Cached: call stacks (``source_from_call_stack``) repeat the same few
    thousand frames in every distinct stack.
    """
    match = _user_match(name)
    return None if match is None else f"{match['file']}:{match['line']}"


@lru_cache(maxsize=1 << 16)
def enclosing_function(name: str) -> str | None:
    """``in func (file:line)`` when the ``python_function`` frame ``name`` is
    user code, else None: the line is where ``func`` was entered."""
    match = _user_match(name)
    return None if match is None else f"{FUNCTION_ONLY_PREFIX}{match['func']} ({match['file']}:{match['line']})"


def source_from_call_stack(stack: str | None) -> str | None:
    """Innermost user frame of a Kineto ``Call stack`` arg (``;``-separated)."""
    if not stack:
        return None
    for frame in stack.split(";"):
        found = user_frame(frame.strip())
        if found:
            return found
    return None


def per_distinct(values: pl.Series, fn: Callable[[str], str | None]) -> pl.Series:
    """``fn`` of every value (null stays null), called once per distinct value.

    Frame names and call stacks repeat every step: a trace of millions of
    frames has a few thousand distinct ones.
    """
    distinct = values.unique().drop_nulls().to_list()
    return values.replace_strict(distinct, [fn(v) for v in distinct], default=None, return_dtype=pl.String)
