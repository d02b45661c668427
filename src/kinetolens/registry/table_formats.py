"""File formats ``kinetolens export`` writes a trace's tables in.

Here, not in the view that writes them, so the command's ``--help`` can
offer them without importing polars.
"""

from __future__ import annotations

#: One file per table in each of these.
FORMATS = ("parquet", "csv", "json")
