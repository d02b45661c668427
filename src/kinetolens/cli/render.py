"""Render tables to the terminal (rich) or as CSV / TSV / JSON.

Every terminal table fits the width it is given (``-w``, else ``COLUMNS``,
else the terminal's): numbers keep their whole width and never wrap, text
cells take what is left, wrap at spaces to at most two lines and are cut in
the middle beyond that (:func:`kinetolens.views.units.middle`; a one-word
name is cut to one line rather than folded mid-word); columns that still do
not fit are left out, last first, and named under the table.  Output that
goes to a pipe or a file, with no width given, is printed at full width so
no header or row is split.  Values are formatted by column name through
:mod:`kinetolens.views.units` (times in the unit that fits, FLOPs, bytes,
counts as integers).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kinetolens import json_codec
from kinetolens.views import units

if TYPE_CHECKING:
    import polars as pl

#: Console width standing for "no limit" (output to a pipe or a file).
UNLIMITED = 100_000
#: Narrowest a text column is squeezed to before columns are left out.
MIN_TEXT = 10
#: Narrowest the first column (the row's name) is squeezed to before other
#: columns are left out: a 14-column name reads ``aten::…orward``.
MIN_KEY = 22
#: Share of the text room the first column (the row's name) gets against each other text column.
KEY_WEIGHT = 3
#: Lines a cell may take.
CELL_LINES = 2
#: Columns that hold identifiers, printed as they are (no thousands separator).
ID_COLUMNS = {"idx", "step", "device", "stream", "rank", "pid", "tid", "id", "sub", "regs", "smem", "world_size"}
#: Float columns that count things: printed as integers.
COUNT_COLUMNS = {"calls", "count", "instances", "launches", "kernels", "n", "events"}
#: Header words shortened so that tables fit 80 columns.
HEADER_WORDS = {"tflops_s": "TFLOP/s", "tflops": "TFLOP/s", "achieved_tflops": "TFLOP/s", "gbps": "GB/s"}


def terminal_width(width: int | None = None) -> int | None:
    """The width to fit: ``-w``, else ``COLUMNS``, else the terminal's; ``None``
    (no limit) when writing to a pipe or a file."""
    if width:
        return width
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


#: Spaces at the end of a line, before any closing style codes.
_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


class _Trimmed:
    """stdout without the spaces rich pads table lines with (a piped table
    was padded to its widest row, hundreds of columns)."""

    def __init__(self, out: Any) -> None:
        self._out = out
        self._pending = ""

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self._out.write(_TRAILING.sub(r"\1", "\n".join(lines)) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._out.write(_TRAILING.sub(r"\1", self._pending))
            self._pending = ""
        self._out.flush()

    def isatty(self) -> bool:
        return self._out.isatty()

    def fileno(self) -> int:
        return self._out.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._out, "encoding", "utf-8")


class _Console(Console):
    """A rich console whose reader closing the pipe (``| head``) ends the command
    as the JSON and CSV outputs end it, status 0 (rich's own exits with 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        # whatever is still buffered goes nowhere, rather than failing again at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise BrokenPipeError


def console(width: int | None = None) -> Console:
    """A rich console at the fitted width; unlimited (but no soft wrapping) off a terminal; no trailing spaces."""
    w = terminal_width(width)
    return _Console(file=_Trimmed(sys.stdout), width=w or UNLIMITED, soft_wrap=False, highlight=False)  # type: ignore[arg-type]


@dataclass
class Column:
    """One terminal column: header, formatted cells, alignment."""

    name: str
    header: str
    cells: list[str]
    numeric: bool

    @property
    def natural(self) -> int:
        """Width with the header on one line."""
        return max([len(self.header), *(len(c) for c in self.cells)])

    @property
    def tight(self) -> int:
        """Width with the header in two lines; text cells are squeezed further by :func:`_widths`."""
        return max([header_width(self.header), *(len(c) for c in self.cells)])


def header_width(header: str) -> int:
    """Narrowest a header renders in two lines at most (split at a space)."""
    words = header.split()
    if len(words) < 2:
        return len(header)
    return min(max(len(" ".join(words[:i])), len(" ".join(words[i:]))) for i in range(1, len(words)))


def _is_time(name: str) -> bool:
    return name.endswith("_us") or name == "us"


def _base(name: str) -> str:
    return name[: -len("_us")] if name.endswith("_us") else "" if name == "us" else name


def _number(value: Any) -> str:
    if units.missing(value):
        return "-"
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:,.0f}" if abs(value) >= 1000 else units.sig(value, 4) if abs(value) >= 1 else units.sig(value, 3)
    return str(value)


def _finite_sizes(values: Sequence[Any]) -> list[float]:
    """The absolute values of a numeric column's finite cells (nulls, NaN and infinities left out)."""
    return [abs(float(v)) for v in values if v is not None and math.isfinite(v)]


def _decimals_for(values: Sequence[Any]) -> Callable[[Any], str]:
    """Floats with one number of decimals per column (about four significant
    figures for its largest value), so the column lines up: 1,946 / 66.35 / 1.523."""
    finite = _finite_sizes(values)
    biggest = max(finite, default=0.0)
    if biggest == 0:
        return _number
    integral = all(v == round(v) for v in finite)
    decimals = 0 if integral else min(max(3 - math.floor(math.log10(biggest)), 0), 3)
    return lambda v: "-" if units.missing(v) else f"{v:,.{decimals}f}" if isinstance(v, float) else str(v)


def _biggest(values: Sequence[Any]) -> float | None:
    return max(_finite_sizes(values), default=None)


#: What a column holds, as far as its format goes.
INTEGER, FLOAT, TEXT = "integer", "float", "text"


@dataclass(frozen=True)
class Cells:
    """One column's values, in the order of the rows, and what they are
    (:data:`INTEGER`, :data:`FLOAT` or :data:`TEXT`): a table to show, with
    or without polars."""

    name: str
    values: list[Any]
    kind: str

    @property
    def numeric(self) -> bool:
        return self.kind != TEXT


def frame_cells(frame: pl.DataFrame) -> list[Cells]:
    """``frame``'s columns as :class:`Cells`."""
    return [
        Cells(name, frame[name].to_list(), INTEGER if dtype.is_integer() else FLOAT if dtype.is_numeric() else TEXT)
        for name, dtype in frame.schema.items()
    ]


def format_column(column: Cells, header: str | None = None, time_us: float | None = None) -> Column:
    """Cells and header for one column, chosen by its name and kind; ``time_us``
    (a table's biggest time) sets the unit of its times where they share one."""
    name, values, numeric = column.name, column.values, column.numeric
    fmt: Callable[[Any], str]
    head = header
    if numeric and _is_time(name):
        unit, scale = units.time_unit(time_us if time_us is not None else _biggest(values))
        fmt = lambda v: units.in_unit(v, scale)  # noqa: E731
        head = re.sub(r"\bus$", unit, head) if head else f"{_base(name).replace('_', ' ')} {unit}".strip()
    elif numeric and (name == "flops" or name.endswith("_flops")):
        fmt = units.flops
    elif numeric and (name == "bytes" or name.endswith("_bytes") or "__bytes" in name):  # and CUPTI's dram__bytes_read.sum
        memoryish = any(w in name for w in ("alloc", "reserved", "peak", "live", "mem"))
        fmt = units.memory if memoryish else units.traffic
    elif numeric and name.endswith("_ratio"):  # one outlier (1,024x) must not take the others' decimals
        fmt = units.sig
    elif numeric and name in ID_COLUMNS:
        fmt = lambda v: "-" if units.missing(v) else str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)  # noqa: E731
    elif numeric and (column.kind == INTEGER or name in COUNT_COLUMNS or name.startswith("n_") or name.endswith("_count")):
        fmt = units.count
    elif numeric:
        fmt = _decimals_for(values)
    else:
        fmt = lambda v: "-" if v is None else str(v)  # noqa: E731
    if numeric and name.startswith("delta"):  # changes carry their sign: +44.435, -7.622
        unsigned = fmt
        fmt = lambda v: "+" + unsigned(v) if not units.missing(v) and v > 0 else unsigned(v)  # noqa: E731
    if head is None:
        head = HEADER_WORDS.get(name, name.replace("_", " "))
    head = " ".join(head.replace("\n/", "/").split())
    return Column(name, head, [fmt(v) for v in values], numeric)


def _wrap_words(text: str, width: int, lines: int) -> list[str] | None:
    """``text`` wrapped at spaces, no word broken, when that takes at most ``lines`` lines."""
    body = text.lstrip(" ")
    indent = text[: len(text) - len(body)]
    if len(indent) >= width // 2:
        indent = ""
    wrapped = textwrap.wrap(
        body, width, initial_indent=indent, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )  # tree rows keep their indentation on both lines
    return wrapped if len(wrapped) <= lines and all(len(line) <= width for line in wrapped) else None


def _one_name(text: str) -> bool:
    """A name is one word, spaces inside brackets included (``kernel<BFloat16, long, unsigned int>``):
    it is cut in the middle to one line, never cut and then wrapped at a template argument."""
    depth = 0
    for ch in text:
        depth += ch in "<([{"
        depth -= ch in ">)]}" and depth > 0
        if ch == " " and depth == 0:
            return False
    return True


def fit_cell(text: str, width: int, lines: int = CELL_LINES) -> str:
    """``text`` in at most ``lines`` lines of ``width``, never folded mid-word
    (which left a stray ``>`` or ``ces`` on a second line), and never both cut
    and wrapped (``optimiz…prop`` over ``96``).

    Text with spaces outside brackets wraps at them when it fits in ``lines``
    lines whole; a name (a kernel, an op, a module path), or text that does
    not fit whole, takes one line, cut in the middle."""
    if len(text) <= width:
        return text
    if not _one_name(text.strip(" ")):
        wrapped = _wrap_words(text, width, lines)
        if wrapped is not None:
            return "\n".join(wrapped)
    return units.middle(text, width)


def _widths(
    cols: list[Column], width: int | None, gap: int, droppable: Sequence[str] = ()
) -> tuple[list[Column], list[int], list[str]]:
    """Column widths that fit ``width``: headers on one line if they can, else
    on two; text columns squeezed (at most to ``MIN_TEXT``); columns left out
    when even that does not fit: those in ``droppable`` (last named first),
    then the last ones."""
    dropped: list[str] = []
    cols = list(cols)
    natural = [c.natural for c in cols]
    if width is None or sum(natural) + gap * (len(cols) - 1) <= width:
        return cols, natural, dropped
    tight = [c.tight for c in cols]
    if sum(tight) + gap * (len(cols) - 1) <= width:
        return cols, tight, dropped

    def fixed(i: int) -> bool:
        return cols[i].numeric or tight[i] <= MIN_TEXT

    def least(i: int) -> int:
        """What a column needs at the least: its width if fixed, else MIN_TEXT (MIN_KEY for the name)."""
        if fixed(i):
            return tight[i]
        return min(tight[i], MIN_KEY) if i == 0 else MIN_TEXT

    # Numbers keep one-line headers while the text still fits in two lines.
    text_need = sum((tight[i] + 1) // 2 for i in range(len(cols)) if not fixed(i))
    wide = [natural[i] if cols[i].numeric else tight[i] for i in range(len(cols))]
    if sum(wide[i] for i in range(len(cols)) if fixed(i)) + text_need + gap * (len(cols) - 1) <= width:
        tight = wide

    queue = [c for c in droppable if c in {col.name for col in cols[1:]}]
    while len(cols) > 1 and sum(least(i) for i in range(len(cols))) + gap * (len(cols) - 1) > width:
        victim = queue.pop() if queue else cols[-1].name
        at = next(i for i, c in enumerate(cols) if c.name == victim)
        dropped.append(cols.pop(at).name)
        tight.pop(at)
    room = width - gap * (len(cols) - 1) - sum(tight[i] for i in range(len(cols)) if fixed(i))
    flexible = [i for i in range(len(cols)) if not fixed(i)]
    widths = list(tight)
    # Weighted water-fill, smallest need per weight first, each up to its own
    # width; the first column (the row's name) weighs KEY_WEIGHT times more.
    weight = {i: KEY_WEIGHT if i == 0 else 1 for i in flexible}
    left = sum(weight.values())
    for i in sorted(flexible, key=lambda j: tight[j] / weight[j]):
        share = room * weight[i] // left
        widths[i] = max(min(tight[i], share), least(i))
        room -= widths[i]
        left -= weight[i]
    return cols, widths, dropped


def table_text(
    frame: pl.DataFrame | Sequence[Cells],
    *,
    title: str | None = None,
    caption: str | None = None,
    width: int | None = None,
    headers: dict[str, str] | None = None,
    droppable: Sequence[str] = (),
    same_time_unit: bool = False,
    show_header: bool = True,
) -> tuple[Table, list[str]]:
    """A rich table of ``frame`` (or of its columns) fitted to ``width`` (``None``: natural widths),
    and the columns it left out.  ``same_time_unit``: every time column in
    the unit of the biggest (tables whose times are compared)."""
    headers = headers or {}
    columns = frame if isinstance(frame, Sequence) else frame_cells(frame)
    times = [c.values for c in columns if _is_time(c.name) and c.numeric]
    biggest = max((b for b in map(_biggest, times) if b is not None), default=None) if same_time_unit else None
    cols = [format_column(c, headers.get(c.name), biggest) for c in columns]
    gap = 2
    cols, widths, dropped = _widths(cols, width, gap, droppable)
    table = Table(
        title=title, header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
        collapse_padding=True, caption_justify="left", title_justify="left", show_header=show_header,
    )
    for col, w in zip(cols, widths):
        table.add_column(
            fit_cell(col.header, w), style="bold" if not show_header and col is cols[0] else None, justify="right" if col.numeric else "left", no_wrap=True,
            min_width=w, max_width=w, overflow="crop",
        )
    for row in zip(*(c.cells for c in cols)) if cols else ():
        table.add_row(*(Text(fit_cell(v, w)) for v, w in zip(row, widths)))
    notes = [caption] if caption else []
    if dropped:
        notes.append(f"not shown at this width: {', '.join(dropped)} (-w or -c to choose)")
    if notes:
        table.caption = "\n".join(notes)
    return table, dropped


def print_table(
    frame: pl.DataFrame | Sequence[Cells],
    *,
    title: str | None = None,
    caption: str | None = None,
    width: int | None = None,
    headers: dict[str, str] | None = None,
    droppable: Sequence[str] = (),
    same_time_unit: bool = False,
    show_header: bool = True,
    out: Console | None = None,
) -> list[str]:
    """Print ``frame`` fitted to the terminal (or to ``out``'s width); returns the columns left out."""
    con = out or console(width)
    w = terminal_width(width) if out is None else (None if con.width >= UNLIMITED else con.width)
    table, dropped = table_text(
        frame, title=title, caption=caption, width=w, headers=headers, droppable=droppable,
        same_time_unit=same_time_unit, show_header=show_header,
    )
    print_captioned(con, table)
    con.line()  # tables in a row stay apart
    return dropped


def print_heading(con: Console, text: str, style: str = "bold") -> None:
    """``text`` at the console's width: a word (a path) longer than a line is cut
    in the middle, never folded mid-word."""
    con.print(Text(" ".join(units.middle(word, con.width) for word in text.split(" ")), style=style))


def print_captioned(con: Console, table: Table) -> None:
    """``table`` with its title and caption as text wrapped at the console's
    width (rich would wrap them at the table's, a few words a line under a
    narrow table, and fold a long path mid-word)."""
    caption, table.caption = table.caption, None
    title, table.title = table.title, None
    if title:
        print_heading(con, str(title), style="italic")
    con.print(table)
    if caption:
        con.print(Text(str(caption)))


def print_pairs(rows: Sequence[tuple[str, str]], *, title: str | None = None, out: Console) -> None:
    """A two-column ``what: value`` table (summaries), values in two lines at most."""
    columns = [Cells("what", [r[0] for r in rows], TEXT), Cells("value", [r[1] for r in rows], TEXT)]
    print_table(columns, title=title, show_header=False, out=out)


def print_fitted(
    frame: pl.DataFrame,
    *,
    key: str,
    title: str | None = None,
    caption: str | None = None,
    width: int | None = None,
    headers: dict[str, str] | None = None,
    droppable: Sequence[str] = (),
    same_time_unit: bool = True,
) -> list[str]:
    """:func:`print_table` for tables keyed by a name column (``key``, first):
    the columns in ``droppable`` go first, last named first, where the row
    does not fit.  Returns the columns left out."""
    del key  # the key is the first column, which is never left out
    return print_table(
        frame, title=title, caption=caption, width=width, headers=headers, droppable=droppable, same_time_unit=same_time_unit
    )


def emit(
    frame: pl.DataFrame,
    fmt: str = "table",
    *,
    title: str | None = None,
    width: int | None = None,
    caption: str | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    if fmt == "table":
        print_table(frame, title=title, caption=caption, width=width, headers=headers)
        return
    out = Streamed(fmt)
    out.write(frame)
    out.finish()


class Streamed:
    """A table written a part at a time as :func:`emit` writes it whole (the
    same bytes in csv, tsv and json; the terminal table once, at the end):
    for a table too large to hold whole, read a step window at a time.
    ``limit``: at most that many rows; :meth:`write` says whether it wants more."""

    def __init__(self, fmt: str, limit: int | None = None) -> None:
        self.fmt, self.left = fmt, limit
        self.rows = 0
        self._empty: pl.DataFrame | None = None
        self._held: list[pl.DataFrame] = []

    def write(self, part: pl.DataFrame) -> bool:
        if self._empty is None:
            self._empty = part.clear()
        if self.left is not None:
            part = part.head(self.left)
            self.left -= part.height
        if part.height:
            if self.fmt in ("csv", "tsv"):
                sys.stdout.write(units.clock_round(part).write_csv(separator="\t" if self.fmt == "tsv" else ",", include_header=self.rows == 0))
            elif self.fmt == "json":
                records = json_codec.encode(units.clock_round(part)).decode()[1:-1]  # the array's items
                sys.stdout.write(("[" if self.rows == 0 else ",") + records)
            else:
                self._held.append(part)
            self.rows += part.height
        return self.left is None or self.left > 0

    def finish(self, width: int | None = None, headers: dict[str, str] | None = None) -> None:
        """What closes the output: the JSON array, a CSV header where no row came, or the terminal table."""
        if self.fmt == "json":
            sys.stdout.write("]\n" if self.rows else "[]\n")
        elif self.fmt in ("csv", "tsv"):
            if not self.rows and self._empty is not None:
                sys.stdout.write(self._empty.write_csv(separator="\t" if self.fmt == "tsv" else ","))
        elif self._empty is not None:
            import polars as pl

            print_table(pl.concat(self._held) if self._held else self._empty, width=width, headers=headers)


def pick_columns(available: Sequence[str], by_width: Sequence[tuple[int, Sequence[str]]], width: int | None) -> list[str]:
    """Default columns for a width: the first ``(max_width, columns)`` entry
    whose max_width is at least ``width`` (no width: the last, widest set)."""
    for limit, cols in by_width:
        if width is not None and width <= limit:
            return [c for c in cols if c in available]
    return [c for c in by_width[-1][1] if c in available]


def emit_json(payload: Any) -> None:
    """``payload`` as indented JSON on stdout, written as the encoder's bytes
    (a big table's JSON is not copied again into text first)."""
    data = json_codec.encode(payload, indent=2)
    out = getattr(sys.stdout, "buffer", None)
    if out is None:  # a text stream (a test's StringIO)
        sys.stdout.write(data.decode() + "\n")
        return
    sys.stdout.flush()
    out.write(data)
    out.write(b"\n")
    out.flush()


def echo_notes(notes: Sequence[str]) -> None:
    """Each note as one ``kinetolens: note:`` line on stderr (so --json output stays one JSON document)."""
    for note in notes:
        click.echo(f"kinetolens: note: {note}", err=True)
