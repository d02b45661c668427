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
            return _rows(value)
        if hasattr(value, "to_list"):
            return value.to_list()
    if isinstance(value, PurePath):
        return str(value)
    if module.startswith("numpy") and hasattr(value, "item"):
        return value.item()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    raise TypeError(f"kinetolens cannot write a {kind.__name__} as JSON")


def _rows(frame: Any) -> Any:
    """A table as its list of row objects.  polars writes them itself where
    every column is of a kind it writes as msgspec would (the same values and
    text, but for an exponent's sign: ``1e+16``; without a Python object per
    value, so a table of a million rows is written in about its own memory,
    not ten times it); other tables go through Python rows."""
    import polars as pl

    if not all(_writes_the_same(dtype) for dtype in frame.schema.values()):
        return frame.to_dicts()
    # msgspec writes a 32-bit float's 64-bit value; polars its shortest 32-bit text.
    wide = frame.with_columns(pl.col(pl.Float32).cast(pl.Float64)) if pl.Float32 in frame.schema.values() else frame
    return msgspec.Raw(wide.write_json().encode())


def _writes_the_same(dtype: Any, nested: bool = False) -> bool:
    """Whether polars' JSON of a column of ``dtype`` is msgspec's of its values:
    numbers, text, booleans, categories, and lists and structs of them (not
    times, dates or decimals, which each writes its own way, nor a 32-bit
    float inside a list or struct, which :func:`_rows` does not widen)."""
    import polars as pl

    if dtype.is_numeric() and not isinstance(dtype, pl.Decimal):
        return not (nested and dtype == pl.Float32)
    if isinstance(dtype, (pl.String, pl.Boolean, pl.Categorical, pl.Enum, pl.Null)):
        return True
    if isinstance(dtype, (pl.List, pl.Array)):
        return _writes_the_same(dtype.inner, nested=True)
    if isinstance(dtype, pl.Struct):
        return all(_writes_the_same(field.dtype, nested=True) for field in dtype.fields)
    return False


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
