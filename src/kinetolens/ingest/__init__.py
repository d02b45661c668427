"""Trace files to columnar tables.  Every reader returns :class:`RawTables`.

The names load on first use: a view that only reads the category names
(:mod:`kinetolens.ingest.categories`) imports none of the readers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetolens._lazy import lazy_names

#: Public name -> the module that defines it, imported when first asked for.
_LAZY = {"RawTables": "kinetolens.ingest.kineto", "read_raw": "kinetolens.ingest.read"}

__all__ = ["RawTables", "read_raw"]

if TYPE_CHECKING:
    from kinetolens.ingest.kineto import RawTables
    from kinetolens.ingest.read import read_raw

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
