"""A count with its noun, singular or plural as the count needs: "1 step", "2 steps".

In the registry (the lowest layer) so analyses, views and the CLI write
counts the same way.
"""

from __future__ import annotations


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` with thousands separators and the noun agreeing with it
    (``plural`` for irregular nouns: ``counted(2, "entry", "entries")``)."""
    noun = singular if n == 1 else (plural if plural is not None else singular + "s")
    return f"{n:,} {noun}"
