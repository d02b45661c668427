"""Readable op parameters (shapes and dtypes) from Kineto's JSON text."""

from __future__ import annotations

import msgspec
import polars as pl

_decode = msgspec.json.Decoder()


def _shapes(text: str | None) -> str | None:
    if not text:
        return None
    try:
        dims = _decode.decode(text)
    except msgspec.DecodeError:
        return text
    shown = [d for d in dims if d != []] if isinstance(dims, list) else dims
    return msgspec.json.encode(shown).decode().replace(",", ", ")


def _types(text: str | None) -> str | None:
    if not text:
        return None
    try:
        types = _decode.decode(text)
    except msgspec.DecodeError:
        return text
    if not isinstance(types, list):
        return str(types)
    kept = [t for t in types if t and t != "Scalar"]
    return ", ".join(str(t) for t in kept) if kept else None


def shapes_expr(col: str = "input_dims") -> pl.Expr:
    """Input shapes without the empty entries of scalar arguments."""
    return pl.col(col).map_elements(_shapes, return_dtype=pl.String)


def dtypes_expr(col: str = "input_types") -> pl.Expr:
    return pl.col(col).map_elements(_types, return_dtype=pl.String)
