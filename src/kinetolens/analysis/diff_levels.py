"""The levels of a diff (:mod:`kinetolens.analysis.diff`), one table each, and
their key columns.  Plain constants (no polars): ``kinetolens diff -h`` lists
the levels without loading a trace."""

from __future__ import annotations

#: The tables a diff can compare (:mod:`kinetolens.analysis.diff` says what each holds).
LEVELS: tuple[str, ...] = ("step", "module", "op", "op_shape", "kernel")
#: Key columns of each level's table.
LEVEL_KEYS: dict[str, tuple[str, ...]] = {
    "step": ("category",),
    "module": ("module",),
    "op": ("name",),
    "op_shape": ("name", "shapes"),
    "kernel": ("name",),
}
