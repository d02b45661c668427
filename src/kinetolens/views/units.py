"""Numbers with units a person reads, and text cut to fit, for every view.

The terminal tables, the report and the dashboard all format through this
module so that one quantity reads the same everywhere: ``3.09 TFLOP``,
``33.8 GB`` (traffic, decimal), ``2.60 GiB`` (memory, binary), ``12.4``
under a ``TFLOP/s`` header, ``55.5%``, times in the unit that fits the
column (us / ms / s).  CSV and JSON keep exact numbers; :func:`clock_round`
only removes float noise below the trace clock's resolution.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from kinetolens.model.vocabulary import TIME_BASIS_WORDS

if TYPE_CHECKING:  # the frame helpers take polars frames; the number formats need no polars
    import polars as pl

#: The one ellipsis every view uses when it cuts text.
ELLIPSIS = "…"
_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB")
#: Time units by size, in microseconds.
TIME_UNITS = (("s", 1e6), ("ms", 1e3), ("us", 1.0))
#: Decimal places of microsecond values in CSV / JSON: Kineto's clock ticks in nanoseconds.
CLOCK_DECIMALS = 3
#: Rate columns: a plain number under a header that names the unit.
RATES = {"tflops_s": "TFLOP/s", "achieved_tflops": "TFLOP/s", "gbps": "GB/s", "achieved_gbps": "GB/s",
         "intensity": "FLOP/byte", "bus_gbps": "GB/s", "algo_gbps": "GB/s", "tokens_per_s": "tokens/s"}  # fmt: skip
#: Columns that count things, whatever their type (a mean over ranks may be a float).


def basis_words(column: str) -> str:
    """A time column's name as people read it (``device_self_us`` -> ``GPU self time``)."""
    return TIME_BASIS_WORDS.get(column, column)


COUNTS = {"calls", "count", "ranks", "steps"}
#: Byte columns that count data moved (decimal units); other ``*bytes`` / ``size`` columns are memory held.
TRAFFIC = {"bytes"}


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def middle(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters in the middle, where long names
    (modules, kernels, files) differ least: ``model.lay…q_proj``."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = (width - 1) // 2 + (width - 1) % 2
    tail = width - 1 - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


def sig(value: float, digits: int = 3) -> str:
    """About ``digits`` significant figures, never in exponent form: 12.4, 0.123, 1,234."""
    if missing(value):
        return "-"
    if value == 0:
        return "0"
    mag = math.floor(math.log10(abs(value)))
    decimals = max(digits - 1 - mag, 0)
    return f"{value:,.{decimals}f}"


def si(value: float | None, unit: str, digits: int = 3) -> str:
    """``3.09 TFLOP``, ``33.8 GB``: decimal prefixes, three significant figures."""
    if missing(value):
        return "-"
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{sig(value / scale, digits)} {prefix}{unit}"
    return f"{sig(value, digits)} {unit}"


def flops(value: float | None) -> str:
    return si(value, "FLOP")


def traffic(value: float | None) -> str:
    """Bytes moved, in decimal units (bandwidths are quoted in GB/s)."""
    return si(value, "B")


def memory(value: float | None) -> str:
    """Bytes held in memory, in binary units as allocators report them: ``2.60 GiB``."""
    if missing(value):
        return "-"
    v = float(value)
    for unit in _BINARY:
        if abs(v) < 1024 or unit == _BINARY[-1]:
            return f"{v:,.0f} B" if unit == "B" else f"{sig(v, 3)} {unit}"
        v /= 1024
    return "-"  # pragma: no cover


def percent(fraction: float | None, decimals: int = 1) -> str:
    """A 0..1 fraction as ``55.5%``."""
    return "-" if missing(fraction) else f"{fraction * 100:.{decimals}f}%"


def count(value: float | int | None) -> str:
    """Counts are integers: ``10``, ``1,024``."""
    return "-" if missing(value) else f"{round(value):,}"


def time_unit(us: float | None) -> tuple[str, float]:
    """The unit (and its size in us) that shows ``us``-sized values in at most
    four integer digits: 3,094 us, 12.8 ms, 45.2 s."""
    biggest = abs(us) if not missing(us) else 0.0
    for unit, scale in TIME_UNITS:
        if biggest >= 10 * scale:
            return unit, scale
    return "us", 1.0


def saving_ms(ms: float | None) -> str:
    """A recommendation's estimated saving: ``0.42 ms``; ``< 0.01 ms`` where it
    rounds to zero (``0.00 ms`` read as no saving at all)."""
    if missing(ms):
        return "-"
    return "< 0.01 ms" if abs(ms) < 0.005 else f"{ms:,.2f} ms"


def duration(us: float | None) -> str:
    """One time with its own unit: ``18.1 us``, ``2,401 us``, ``30.9 ms``, ``12.0 s``."""
    if missing(us):
        return "-"
    unit, scale = time_unit(us)
    return f"{sig(us / scale, 3)} {unit}"


def in_unit(us: float | None, scale: float) -> str:
    """A time in a column's unit, to the microsecond (or 3 decimals of seconds)."""
    if missing(us):
        return "-"
    v = us / scale
    decimals = 1 if scale == 1.0 else 3 if scale == 1e3 else 3
    return f"{v:,.{decimals}f}"


def clock_round(frame: pl.DataFrame) -> pl.DataFrame:
    """Float time columns (``*_us``) rounded to the clock's resolution, for CSV and JSON:
    ``18.112`` rather than ``18.112000000000002``."""
    import polars as pl

    cols = [c for c, t in frame.schema.items() if t in (pl.Float64, pl.Float32) and (c.endswith("_us") or c == "us")]
    return frame.with_columns(pl.col(cols).round(CLOCK_DECIMALS)) if cols else frame


def shares_as_percent(frame: pl.DataFrame) -> pl.DataFrame:
    """``*_share`` columns (0..1, as analyses return shares) as ``*_share_pct``
    (70.0, shown as 70.0%), for tables shown to people."""
    import polars as pl

    shares = [c for c in frame.columns if c.endswith("_share") and frame.schema[c].is_numeric()]
    return frame.with_columns(pl.col(c) * 100.0 for c in shares).rename({c: f"{c}_pct" for c in shares})


def _is_percent(name: str) -> bool:
    """Columns already in percent (0..100): ``pct``, ``*_pct``, ``pct_*`` and the profiler's occupancy (%)."""
    return name == "pct" or name.endswith("_pct") or name.startswith("pct_") or name == "occupancy"


#: Identifiers that reach tables as values, in words (booleans read yes / no).
VALUE_WORDS = {"cpu_exec": "CPU", "window_sum": "window", "True": "yes", "False": "no"}
#: Header words for column names that do not read as English with their underscores swapped for spaces.
HEADER_WORDS = {"share_pct": "share (%)", "mean_per_step": "mean per step", "cpu_exec": "CPU", "pct_of_step": "% of step"}


def column_format(name: str, dtype: pl.DataType) -> tuple[str, str]:
    """:func:`_column_format` with the header in words (no underscores)."""
    kind, label = _column_format(name, dtype)
    return kind, HEADER_WORDS.get(label, label).replace("_", " ")


def _column_format(name: str, dtype: pl.DataType) -> tuple[str, str]:
    """How a column reads: its kind (``percent``, ``time``, ``ms``, ``memory``, ``traffic``,
    ``flops``, ``rate``, ``count``, ``number`` or ``text``) and its header label with the unit.
    Sources hold shares as percent (``*_pct``), never as 0..1 fractions."""
    if not dtype.is_numeric():
        return "text", name
    if _is_percent(name):
        if name == "pct":
            return "percent", "% of step"
        if name.startswith("pct_"):
            return "percent", "% " + name.removeprefix("pct_").replace("_", " ")
        return "percent", f"{name.removesuffix('_pct')} (%)"
    if name.endswith("_us") or name == "us":
        return "time", name.removesuffix("_us")
    if name.endswith("_ms"):
        return "ms", f"{name.removesuffix('_ms')} (ms)"
    if name in TRAFFIC or name.endswith("_traffic_bytes"):
        return "traffic", name
    if name.endswith("bytes") or name == "size":
        return "memory", name.removesuffix("_bytes")
    if name == "flops":
        return "flops", "FLOPs"
    if name in RATES:
        return "rate", RATES[name]
    for suffix, unit in (("_gbps", "GB/s"), ("_tflops", "TFLOP/s")):
        if name.endswith(suffix):
            return "rate", f"{name.removesuffix(suffix)} ({unit})"
    if dtype.is_integer() or name in COUNTS or name.endswith(("_calls", "_count")):
        return "count", name
    return "number", name


def cell(kind: str, value: Any, scale: float) -> str:
    """One value as :func:`column_format`'s ``kind`` reads (``scale``: a time column's unit in us)."""
    if missing(value):
        return "-"
    if kind == "percent":
        return percent(value / 100.0)
    if kind == "time":
        return in_unit(value, scale)
    if kind == "memory":
        return memory(value)
    if kind == "traffic":
        return traffic(value)
    if kind == "flops":
        return flops(value)
    if kind == "count":
        return count(value)
    if kind == "ms":
        return in_unit(value * 1e3, scale)
    if kind in ("rate", "number"):
        return sig(value, 3) if abs(value) < 1000 else f"{value:,.0f}"
    text = str(value)
    return VALUE_WORDS.get(text, text)


def display(frame: pl.DataFrame, shown: pl.DataFrame) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """Columns (name, header label, kind, numeric) and the shown rows as the text a person reads.

    The table's times take one unit (us, ms or s) for all its rows and
    columns (``*_ms`` columns too), chosen from the whole table's largest
    value, so columns compare and line up as the pager moves."""
    columns, scales = [], []
    kinds = {name: column_format(name, dtype) for name, dtype in shown.schema.items()}
    biggest = [
        float(frame[name].abs().max()) * (1e3 if kind == "ms" else 1.0)  # type: ignore[arg-type]
        for name, (kind, _) in kinds.items()
        if kind in ("time", "ms") and frame.height and frame[name].abs().max() is not None
    ]
    unit, table_scale = time_unit(max(biggest, default=None))
    for name, dtype in shown.schema.items():
        kind, label = kinds[name]
        scale = 1.0
        if kind in ("time", "ms"):
            scale = table_scale
            label = f"{label.removesuffix(' (ms)')} ({unit})"
        columns.append({"name": name, "label": label, "kind": kind, "numeric": dtype.is_numeric()})
        scales.append((kind, scale))
    rows = [[cell(k, v, sc) for (k, sc), v in zip(scales, r)] for r in shown.iter_rows()]
    return columns, rows


def beats_model_note(frame: pl.DataFrame, key: str) -> str | None:
    """One line naming the rows flagged ``beats_model`` (faster than their
    roof allows) with their % of roof, or None: the figure is read as a
    model that is off for them, not as headroom."""
    if "beats_model" not in frame.columns or "pct_of_roof" not in frame.columns:
        return None
    import polars as pl

    flagged = frame.filter(pl.col("beats_model").fill_null(False))
    if flagged.height == 0:
        return None
    named = ", ".join(f"{str(r[key]).strip()} {r['pct_of_roof']:.1f}%" for r in flagged.head(3).iter_rows(named=True))
    more = f" and {flagged.height - 3} more" if flagged.height > 3 else ""
    return (
        f"above 100% of roof: {named}{more}: faster than the roofline model allows (its modeled bytes or "
        "FLOPs, or the GPU's peaks, are off for this work), not a measurement to trust"
    )
