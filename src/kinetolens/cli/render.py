"""Render tables to the terminal (rich) or as CSV / TSV / JSON."""

from __future__ import annotations

import sys
from typing import Any

import msgspec
import polars as pl
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
