"""The one JSON encoder of kinetolens' results.

Typed results (dataclasses, msgspec structs), polars tables (a list of row
objects) and plain values encode the same way wherever they are written:
``--json`` on the terminal, the cache's stored results, the dashboard's API
and the exported tables.  Non-finite floats are written as null.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")


def _plain(value: Any) -> Any:
    """What msgspec cannot encode itself: a table's rows, a path, a numpy scalar, a result with ``to_dict``."""
    kind = type(value)
    module = kind.__module__ or ""
    if module.startswith("polars"):
        if hasattr(value, "to_dicts"):
            return value.to_dicts()
        if hasattr(value, "to_list"):
            return value.to_list()
    if isinstance(value, PurePath):
        return str(value)
    if module.startswith("numpy") and hasattr(value, "item"):
        return value.item()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    raise TypeError(f"kinetolens cannot write a {kind.__name__} as JSON")


_ENCODER = msgspec.json.Encoder(enc_hook=_plain)


def encode(value: Any, *, indent: int = 0) -> bytes:
    """``value`` as JSON bytes (``indent`` > 0: one field a line, for people)."""
    data = _ENCODER.encode(value)
    return msgspec.json.format(data, indent=indent) if indent else data


def decode(data: bytes | str, into: type[T] | Any = Any) -> T:
    """JSON back into ``into`` (a result type: checked field by field; a
    mismatch raises :class:`msgspec.ValidationError`)."""
    return msgspec.json.decode(data, type=into)  # type: ignore[no-any-return]


def to_builtins(value: Any) -> Any:
    """``value`` as dicts, lists and scalars: what ``decode(encode(value))`` gives."""
    return msgspec.json.decode(encode(value))
