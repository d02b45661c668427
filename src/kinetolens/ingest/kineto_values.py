"""Value conversions for Kineto columns: exact, vectorized where safe.

Microseconds become exact integer nanoseconds, ids must fit 64 bits, and
anything that does not fit is reported, never wrapped or dropped.  Each
function turns a whole column of decoded values into a polars Series; the
per-value Python fallbacks run only for the chunks that need them.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from operator import itemgetter
from typing import Any

import msgspec
import polars as pl

INT64_MAX = (1 << 63) - 1
# Beyond this many microseconds a float64 cannot carry nanosecond digits.
FLOAT_EXACT_US = float(1 << 53) / 1000.0
MAX_TS_US = INT64_MAX / 1000.0
_MAX_INT_US = INT64_MAX // 1000

class NeedsExactTime(Exception):
    """A float timestamp too large for float64 nanoseconds: decode its text."""


def as_int(value: int | str | None) -> int | None:
    """Thread and process ids: ints, numeric strings, or 'stream 7'."""
    if value is None or isinstance(value, int):
        return value
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    head, _, tail = text.rpartition(" ")
    if head and tail.isdigit():
        return int(tail)
    return None


def nulls(n: int, dtype: pl.DataType) -> pl.Series:
    """A column of ``n`` nulls, without building a list of them."""
    return pl.Series([None], dtype=dtype).new_from_index(0, n)


def ints(values: list[Any], convert: Callable[[Any], int | None] | None = None) -> pl.Series:
    """An Int64 column; values that are not plain ints go through ``convert``.

    Most optional args are absent from most events; such a column is known
    to be all null after one C-level count, with no conversion at all.  A
    value that still does not fit (an id beyond 64 bits) raises the
    ``TypeError`` that the caller turns into a one-line error.
    """
    # The first value alone rules out most columns: counting Nones costs a
    # comparison per int, but only an identity check per None.
    if not values or (values[0] is None and values.count(None) == len(values)):
        return nulls(len(values), pl.Int64)
    try:
        return pl.Series(values, dtype=pl.Int64, strict=True)
    except TypeError:
        if convert is None:
            raise
        # a few string ids among ints (a 'Spans' process): the ints pass as they are
        return pl.Series([v if v.__class__ is int else convert(v) for v in values], dtype=pl.Int64, strict=True)


def us_to_ns(value: float | None) -> int | None:
    """Microseconds (int or float) to integer nanoseconds, per value."""
    if value is None:
        return None
    if isinstance(value, int):
        return value * 1000
    # An infinite value raises OverflowError here, which the column check
    # reports; a finite one near float64's limit becomes an exact huge int
    # that fails the Int64 column the same way.
    scaled = value * 1000.0
    return round(scaled) if scaled != float("inf") and scaled != -float("inf") else int(value) * 1000


def raw_us_to_ns(raw: msgspec.Raw) -> int | None:
    """Exact decimal-text microseconds to integer nanoseconds."""
    text = bytes(raw)
    if text == b"null":
        return None
    whole, dot, frac = text.partition(b".")
    if b"e" in text or b"E" in text:
        # Decimal, not float: exact, and 1e400 stays a (huge) number rather
        # than inf, so the column check reports it as out of range.
        return round(Decimal(text.decode()) * 1000)
    sign = -1 if whole.startswith(b"-") else 1
    ns = int(whole) * 1000
    if dot:
        digits = frac[:3].ljust(3, b"0")
        extra = frac[3:4]
        part = int(digits) + (1 if extra and extra >= b"5" else 0)
        ns += sign * part
    return ns


#: Plain decimal microseconds (an epoch in microseconds has 16 digits);
#: anything else (exponents, more digits) goes per value.
_PLAIN_DECIMAL_US = r"^(-?)(\d{1,16})(?:\.(\d+))?$"


def exact_times(raws: list[msgspec.Raw]) -> pl.Series | None:
    """Decimal-text microseconds to exact Int64 nanoseconds, in polars.

    The same rule as :func:`raw_us_to_ns` (three decimals kept, the fourth
    rounds half up) on whole columns: epoch-scale float timestamps are common
    enough that a Python call per value made such traces several times
    slower to load.  Returns None when any value is not a plain decimal; the
    caller then converts per value, which also reports what does not fit.
    """
    text = texts(raws)
    parts = text.str.extract_groups(_PLAIN_DECIMAL_US).struct.unnest()
    whole = parts["2"].cast(pl.Int64)
    if whole.null_count() != text.null_count() or (whole.max() or 0) >= _MAX_INT_US:  # type: ignore[operator]
        return None
    frac = pl.col("3").fill_null("")
    whole_ns = pl.col("2").cast(pl.Int64) * 1000
    first3 = (frac + "000").str.slice(0, 3).cast(pl.Int64)
    round_up = (frac.str.slice(3, 1) >= "5").cast(pl.Int64)
    magnitude = whole_ns + first3 + round_up
    signed = pl.when(pl.col("1") == "-").then(-magnitude).otherwise(magnitude)
    return parts.select(signed.alias("ts")).to_series()


def times(values: list[Any], is_ts: bool) -> pl.Series:
    """Microsecond times to exact Int64 nanoseconds, vectorized when safe.

    Integers are scaled exactly.  Floats below ``FLOAT_EXACT_US`` round to the
    nearest nanosecond exactly as ``round(v * 1000.0)`` does (half to even).
    Larger float *timestamps* cannot be converted from a float64 at all: the
    caller re-decodes the chunk keeping their JSON text.
    """
    try:
        ints = pl.Series(values, dtype=pl.Int64, strict=True)
    except TypeError:
        ints = None
    if ints is not None:
        lo, hi = ints.min(), ints.max()
        if lo is None or (-_MAX_INT_US <= lo and hi <= _MAX_INT_US):  # type: ignore[operator]
            return ints * 1000
        return pl.Series(list(map(us_to_ns, values)), dtype=pl.Int64, strict=True)
    floats = pl.Series(values, dtype=pl.Float64, strict=False)
    top = floats.abs().max()
    if top is not None and top < FLOAT_EXACT_US:  # type: ignore[operator]
        return (floats * 1000.0).round(0, mode="half_to_even").cast(pl.Int64)
    if is_ts and any(isinstance(v, float) and abs(v) >= FLOAT_EXACT_US for v in values):
        raise NeedsExactTime
    return pl.Series(list(map(us_to_ns, values)), dtype=pl.Int64, strict=True)


def shared_texts(values: list[str | None]) -> pl.Series:
    """Strings (kernel names, shapes, call stacks) as a column that stores
    each distinct one once.

    Built from a Python list, every row would get its own copy of its text;
    a trace repeats the same kernel names (hundreds of bytes of C++
    signature) and op shapes thousands of times.  So the distinct values
    become one small column and each row a 16-byte view into it, and later
    gathers (the model's kernel table) keep sharing the texts.  Costs a dict
    lookup per value, so it is kept for columns whose texts are long.
    """
    if values.count(None) == len(values):  # a field no event has: no lookups
        return nulls(len(values), pl.String)
    index: dict[str | None, int] = {}
    codes = [index.setdefault(v, len(index)) for v in values]
    return _gathered(list(index), codes)


def _gathered(distinct: list[str | None], codes: list[int]) -> pl.Series:
    """``distinct[code]`` for every code, as views into one column of ``distinct``."""
    return pl.Series(distinct, dtype=pl.String).gather(pl.Series(codes, dtype=pl.UInt32))


def texts(raws: list[msgspec.Raw]) -> pl.Series:
    """JSON texts (shapes, dtypes) as strings, absent ones null.

    One join and one split in C instead of a Python call per value: NUL
    cannot occur in JSON text, so it separates the values.  A column that is
    absent from every event (shapes in a trace taken without
    ``record_shapes``) is seen from the joined length alone.
    """
    n = len(raws)
    joined = b"\x00".join(raws)
    if len(joined) == max(n - 1, 0):
        return nulls(n, pl.String)
    # Stored once per distinct text (see shared_texts), in the same pass
    # that maps empty and ``null`` texts to null.
    index: dict[str | None, int] = {None: 0, "": 0, "null": 0}
    codes = [index.setdefault(text, len(index) - 2) for text in joined.decode().split("\x00")]
    return _gathered([None, *list(index)[3:]], codes)


_NO_DIM3 = [None, None, None]


def _dim3(value: list[int] | str | None) -> list[int | None]:
    """A launch grid/block, written as a list or as a string like '[1, 2, 3]'."""
    if isinstance(value, str):
        parts = value.replace("[", " ").replace("]", " ").replace(",", " ").split()
        value = [int(p) for p in parts if p.isdigit()]
    if not value:
        return _NO_DIM3
    return (list(value) + _NO_DIM3)[:3]


def triple(values: list[Any], prefix: str) -> dict[str, pl.Series]:
    dims = [v if type(v) is list and len(v) == 3 else _dim3(v) for v in values]
    return {
        f"{prefix}_{axis}": pl.Series(list(map(itemgetter(i), dims)), dtype=pl.Int64, strict=True)
        for i, axis in enumerate("xyz")
    }


def coalesce(a: pl.Series, b: pl.Series) -> pl.Series:
    if b.null_count() == len(b):
        return a
    return pl.select(pl.coalesce(pl.lit(a), pl.lit(b))).to_series()


# -- tables -------------------------------------------------------------------


class ColumnError(Exception):
    """A column's values do not fit its type; carries what to report."""

    def __init__(self, column: str, values: list[Any]) -> None:
        super().__init__(column, values)  # args rebuild it when unpickled (decode workers)
        self.column = column
        self.values = values


def column(name: str, build: Callable[[], pl.Series], values: list[Any]) -> pl.Series:
    try:
        return build().alias(name)
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        raise ColumnError(name, values) from None


def out_of_range_message(table: str, err: ColumnError) -> str:
    """Name the column and the value that did not fit (error path only)."""
    name = err.column
    is_time = name in ("ts", "dur")
    for v in err.values:
        if isinstance(v, float) and (v != v or abs(v) == float("inf")):
            return f"a '{name}' value in the {table} events is out of range (not a finite number)"
        if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
            continue
        exact = v if isinstance(v, Decimal) else Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
        limit = Decimal(MAX_TS_US) if is_time else Decimal(INT64_MAX)
        if abs(exact) > limit:
            shown = str(v) if isinstance(v, int) and len(str(v)) <= 24 else _short(exact)
            unit = " us" if is_time else ""
            return f"'{name}' value {shown}{unit} in the {table} events is out of range (does not fit 64 bits)"
    return f"a value of '{name}' in the {table} events does not fit its column"


def _short(value: Decimal) -> str:
    """``1.7e+306`` rather than 307 digits (or ``1.70000e+306``)."""
    text = f"{value:.6g}"
    mantissa, e, exponent = text.partition("e")
    if e and "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return mantissa + e + exponent
