"""Byte sizes written by people: ``10G``, ``512M``, ``2.5GiB``, ``4096``."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def parse_size(text: str | None) -> int | None:
    """Bytes, with an optional K/M/G/T (binary) suffix; None if not a size."""
    match = _SIZE.match(text) if text else None
    if match is None:
        return None
    number, unit = match.groups()
    return int(float(number) * (1 << (10 * "BKMGT".index(unit.upper() or "B"))))
