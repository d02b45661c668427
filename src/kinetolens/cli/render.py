"""Render tables to the terminal (rich) or as CSV / TSV / JSON."""

from __future__ import annotations

import math
import sys
from typing import Any

import msgspec
import polars as pl
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text


def _cell(value: Any) -> Text:
    """Cells are plain text: kernel names such as ``[lambda(int) (instance 1)]``
    would otherwise be read as rich markup and vanish."""
    if value is None or (isinstance(value, float) and value != value):
        return Text("-")
    if isinstance(value, float):
        return Text(f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.1f}")
    return Text(str(value))


def emit(frame: pl.DataFrame, fmt: str = "table", *, title: str | None = None, width: int | None = None) -> None:
    if fmt == "csv":
        sys.stdout.write(frame.write_csv())
    elif fmt == "tsv":
        sys.stdout.write(frame.write_csv(separator="\t"))
    elif fmt == "json":
        sys.stdout.write(msgspec.json.encode(frame.to_dicts()).decode() + "\n")
    else:
        table = Table(title=title, show_lines=False, header_style="bold")
        for name in frame.columns:
            numeric = frame.schema[name].is_numeric()
            table.add_column(name, justify="right" if numeric else "left", overflow="fold")
        for row in frame.iter_rows():
            table.add_row(*(_cell(v) for v in row))
        Console(width=width, soft_wrap=False).print(table)


def emit_json(payload: Any) -> None:
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(payload), indent=2).decode() + "\n")


def number_text(value: object) -> str:
    """A number as the terminal tables show it: thousands separated, three significant digits below 10."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    return str(value)


#: Narrowest a folded key column gets before lower-priority columns are dropped.
MIN_KEY_WIDTH = 16
#: Widest a text column other than the key gets (longer values end in an ellipsis).
MAX_TEXT_WIDTH = 24


def print_fitted(
    frame: pl.DataFrame,
    *,
    key: str,
    title: str | None = None,
    caption: str | None = None,
    width: int | None = None,
    headers: dict[str, str] | None = None,
    droppable: list[str] | tuple[str, ...] = (),
) -> list[str]:
    """Print ``frame`` to fit the terminal: numbers never wrap, other text
    columns stay on one line, and ``key`` (names) folds onto at most two.

    Where the row does not fit, the columns in ``droppable`` go first (last
    named first), then the longest keys are cut with an ellipsis.  Returns
    the dropped columns, for a caption pointing to ``-c``.
    """
    console = Console(width=width, soft_wrap=False)
    total = console.width
    headers = headers or {}
    cells = {c: [number_text(v) for v in frame[c].to_list()] for c in frame.columns}

    def col_width(c: str) -> int:
        head = max(len(line) for line in headers.get(c, c).split("\n"))
        natural = max([head, *(len(s) for s in cells[c])])
        return natural if frame.schema[c].is_numeric() else min(natural, MAX_TEXT_WIDTH)

    shown = list(frame.columns)
    dropped: list[str] = []
    queue = [c for c in droppable if c in shown]
    key_len = max([len(s) for s in cells[key]] or [1])
    while True:
        others = sum(col_width(c) for c in shown if c != key)
        avail = total - others - (len(shown) - 1)  # the box draws one space between columns
        if avail >= min(key_len, max(MIN_KEY_WIDTH, -(-key_len // 2))) or not queue:
            break
        drop = queue.pop()
        shown.remove(drop)
        dropped.append(drop)
    key_width = max(4, min(key_len, avail))
    limit = 2 * key_width
    widths = {c: col_width(c) for c in shown if c != key}
    slack = avail - key_width
    for c in shown:  # room left over: long text values (a direction list) in full
        if c != key and not frame.schema[c].is_numeric() and slack > 0:
            natural = max([len(headers.get(c, c)), *(len(s) for s in cells[c])])
            grow = min(slack, natural - widths[c])
            widths[c] += grow
            slack -= grow

    def cut(text: str) -> str:
        return text if len(text) <= limit else text[: limit - 1] + "…"

    if dropped:
        left_out = f"left out at this width: {', '.join(dropped)} (widen the terminal or use -w, -c)"
        caption = f"{caption}\n{left_out}" if caption else left_out
    table = Table(
        title=title, caption=caption, header_style="bold", box=box.SIMPLE_HEAD, padding=0,
        pad_edge=False, caption_justify="left", show_edge=False,
    )
    for c in shown:
        header = headers.get(c, c)
        if c == key:
            table.add_column(header, overflow="fold", width=key_width)
        elif frame.schema[c].is_numeric():
            table.add_column(header, justify="right", no_wrap=True, width=widths[c])
        else:
            table.add_column(header, no_wrap=True, overflow="ellipsis", width=widths[c])
    for i in range(frame.height):
        table.add_row(*(Text(cut(cells[c][i]) if c == key else cells[c][i]) for c in shown))
    console.print(table)
    return dropped
