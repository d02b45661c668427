"""The attributed trace model built from raw ingest tables.

The names load on first use, so that a view reading only the model's words
(:mod:`kinetolens.model.vocabulary`) does not build polars' tables' machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetolens._lazy import lazy_names

#: Public name -> the module that defines it, imported when first asked for.
_LAZY = {"Trace": "kinetolens.model.trace", "build_trace": "kinetolens.model.build"}

__all__ = ["Trace", "build_trace"]

if TYPE_CHECKING:
    from kinetolens.model.build import build_trace
    from kinetolens.model.trace import Trace

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
