"""Which python_function frames are the user's code, and nn.Module names.

Kept as data: a frame is internal when its file path contains one of
``INTERNAL_PATH_PARTS``.  The innermost frame that is not internal is the
source line we report for an op, as PyProf's program trace did.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

import polars as pl

MODULE_PREFIX = "nn.Module: "

INTERNAL_PATH_PARTS = (
    "torch/",
    "site-packages/",
    "dist-packages/",
    "<built-in",
    "<frozen",
    "threading.py",
    "runpy.py",
    "contextlib.py",
    "functools.py",
    "typing.py",
    "kinetolens/",
    "lib/python3",
    "torchinductor_",  # inductor's default cache dir: /tmp/torchinductor_<user>/
)

#: Inductor's generated wrapper modules, wherever $TORCHINDUCTOR_CACHE_DIR
#: puts them: ``<dir>/<2 chars>/c<hash>.py``.  Their frames are the compiler's
#: code, not the user's; the source line is the user frame that called them.
_GENERATED = re.compile(r"/[a-z0-9]{2}/c[a-z0-9]{40,}\.py$")

_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")


@lru_cache(maxsize=1 << 16)
def user_frame(name: str) -> str | None:
    """``file:line`` when ``name`` is a frame of user code, else None.

    Cached: call stacks (``source_from_call_stack``) repeat the same few
    thousand frames in every distinct stack.
    """
    match = _FRAME.match(name)
    if match is None:
        return None
    file = match["file"]
    if any(part in file for part in INTERNAL_PATH_PARTS) or _GENERATED.search(file):
        return None
    return f"{file}:{match['line']}"


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
