"""Open an Nsight Systems SQLite export and query it into polars frames.

Why a layer of its own: ``nsys export --type sqlite`` changed its tables and
columns from release to release (``globalTid`` or separate process/thread
columns, names inline or as ``StringIds`` ids, optional ``textId``...).  The
readers never assume a column exists: they ask :class:`Database` and get
``NULL`` for what this file lacks, so one query serves every variant.

Everything that can go wrong with the file itself (not SQLite, truncated,
corrupt pages, wrong value types) becomes a one-line :class:`TraceError`.
"""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from kinetolens.errors import TraceError
from kinetolens.ingest.text_repair import decode_replacing

T = TypeVar("T")
#: How sqlite3 words a TEXT value that is not UTF-8.
_NOT_UTF8 = "Could not decode to UTF-8"

#: Rows fetched per batch: bounds the Python tuples alive at once.
FETCH_ROWS = 65536
_HEADER_BYTES = 100
#: ``globalTid``/``globalPid`` pack hardware/VM id, pid and tid as bit fields:
#: pid in bits 24..47, tid in bits 0..23.
_ID_MASK = 0xFFFFFF


def quote(name: str) -> str:
    """An SQL identifier, quoted (table and column names come from the file)."""
    return '"' + name.replace('"', '""') + '"'


def check_header(path: Path) -> None:
    """Reject a truncated file before SQLite reads garbage pages.

    SQLite itself notices a cut-off file only when a query touches a missing
    page, and then says just "malformed".  The header records the database
    size in pages, so comparing it with the file size names the problem.
    """
    try:
        with path.open("rb") as fh:
            head = fh.read(_HEADER_BYTES)
        size = path.stat().st_size
    except OSError as exc:
        raise TraceError(path, f"cannot read file ({exc.strerror})") from None
    if len(head) < _HEADER_BYTES:
        raise TraceError(path, f"truncated SQLite file: {size} bytes, shorter than the 100-byte SQLite header")
    (page_size,) = struct.unpack(">H", head[16:18])
    page_size = 65536 if page_size == 1 else page_size
    (change_counter,) = struct.unpack(">I", head[24:28])
    (pages,) = struct.unpack(">I", head[28:32])
    (valid_for,) = struct.unpack(">I", head[92:96])
    if page_size < 512 or page_size & (page_size - 1):
        raise TraceError(path, f"corrupt SQLite file: invalid page size {page_size} in the header")
    if pages and change_counter == valid_for and size < pages * page_size:
        raise TraceError(
            path, f"truncated SQLite file: {size} bytes, the header says {pages * page_size} ({pages} pages)"
        )


class Database:
    """A read-only SQLite export with its tables and columns looked up once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: Invalid UTF-8 byte runs replaced with U+FFFD, and where.
        self.replaced = 0
        self.replaced_in: list[str] = []
        uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
        try:
            self.conn = sqlite3.connect(uri, uri=True)
            rows = self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
            ).fetchall()
            self.columns: dict[str, dict[str, str]] = {}
            for (name,) in rows:
                info = self.conn.execute(f"PRAGMA table_info({quote(name)})").fetchall()
                self.columns[name] = {r[1]: (r[2] or "").upper() for r in info}
        except sqlite3.Error as exc:
            raise TraceError(path, f"corrupt SQLite file ({_first_line(exc)})") from None
        except UnicodeDecodeError:  # a damaged schema: table or column names that are not UTF-8
            raise TraceError(path, "corrupt SQLite file (its schema holds names that are not UTF-8)") from None

    def close(self) -> None:
        self.conn.close()

    def has(self, table: str, *columns: str) -> bool:
        cols = self.columns.get(table)
        return cols is not None and all(c in cols for c in columns)

    def col(self, table: str, alias: str, column: str) -> str:
        """``alias."column"`` when the table has it, else ``NULL``."""
        return f"{alias}.{quote(column)}" if self.has(table, column) else "NULL"

    def count(self, table: str) -> int:
        if table not in self.columns:
            return 0
        return int(self.scalar(f"SELECT count(*) FROM {quote(table)}", table) or 0)

    def _run(self, sql: str, what: str, fetch: Callable[[sqlite3.Cursor], T]) -> T:
        """``fetch`` over the rows of ``sql``; text that is not UTF-8 replaced.

        SQLite stores whatever bytes a tool wrote as TEXT, and sqlite3's C
        decoding refuses the whole query at the first invalid value.  Only
        then is the query run again through a Python decoder that replaces
        (and counts) the invalid bytes, so valid files keep the fast path.
        """
        try:
            return fetch(self.conn.execute(sql))
        except sqlite3.OperationalError as exc:
            if not str(exc).startswith(_NOT_UTF8):
                raise
        self.conn.text_factory = self._replacing
        try:
            found = self.replaced
            out = fetch(self.conn.execute(sql))
            if self.replaced > found and what not in self.replaced_in:
                self.replaced_in.append(what)
            return out
        finally:
            self.conn.text_factory = str

    def _replacing(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            text, count = decode_replacing(raw)
            self.replaced += count
            return text

    def scalar(self, sql: str, what: str) -> Any:
        try:
            row = self._run(sql, what, sqlite3.Cursor.fetchone)
        except sqlite3.Error as exc:
            raise TraceError(self.path, f"corrupt SQLite file: {_first_line(exc)} (reading {what})") from None
        return row[0] if row else None

    def text(self, table: str, alias: str, columns: list[str], joins: list[str]) -> str:
        """The first non-null text among ``columns``, resolving ``StringIds`` ids.

        A column may hold the text itself or an id into ``StringIds``
        depending on the nsys version (and, for NVTX, per row), so each one is
        tried both ways.  Appends the needed joins to ``joins``.
        """
        parts: list[str] = []
        for column in columns:
            if not self.has(table, column):
                continue
            ref = f"{alias}.{quote(column)}"
            if self.has("StringIds", "id", "value"):
                sid = f"_s{len(joins)}"
                joins.append(f"LEFT JOIN StringIds AS {sid} ON {sid}.id = {ref} AND typeof({ref}) = 'integer'")
                parts.append(f"{sid}.value")
            parts.append(f"CASE WHEN typeof({ref}) = 'text' THEN {ref} END")
        if not parts:
            return "NULL"
        return parts[0] if len(parts) == 1 else f"COALESCE({', '.join(parts)})"

    def thread(self, table: str, alias: str) -> tuple[str, str, str]:
        """SQL for (process key, OS pid, OS tid) of a host-side row.

        The process key is the OS pid, whichever way the table stores it, so
        host and device tables of one file always agree on it even where
        they come from different schema generations.
        """
        if self.has(table, "globalTid"):
            g = f"{alias}.globalTid"
            pid = f"(({g} >> 24) & {_ID_MASK})"
            return pid, pid, f"({g} & {_ID_MASK})"
        for pid, tid in (("pid", "tid"), ("processId", "threadId")):
            if self.has(table, pid, tid):
                return f"{alias}.{pid}", f"{alias}.{pid}", f"{alias}.{tid}"
        return "NULL", "NULL", "NULL"

    def process(self, table: str, alias: str) -> tuple[str, str]:
        """SQL for (process key, OS pid) of a device-side row."""
        if self.has(table, "globalPid"):
            pid = f"(({alias}.globalPid >> 24) & {_ID_MASK})"
            return pid, pid
        for pid in ("pid", "processId"):
            if self.has(table, pid):
                return f"{alias}.{pid}", f"{alias}.{pid}"
        return "NULL", "NULL"

    def rows(self, sql: str, what: str) -> list[tuple[Any, ...]]:
        """All rows of a small query (metadata tables: a few rows each)."""
        try:
            return self._run(sql, what, sqlite3.Cursor.fetchall)
        except sqlite3.Error as exc:
            raise TraceError(self.path, f"corrupt SQLite file: {_first_line(exc)} (reading {what})") from None

    def frame(self, sql: str, schema: dict[str, pl.DataType], what: str) -> pl.DataFrame:
        """Run ``sql`` and build a frame column-wise, one batch of rows at a time."""
        parts: list[pl.DataFrame] = []
        rows: list[tuple[Any, ...]] = []

        def collect(cursor: sqlite3.Cursor) -> None:
            nonlocal rows
            parts.clear()
            while True:
                rows = cursor.fetchmany(FETCH_ROWS)
                if not rows:
                    break
                parts.append(pl.DataFrame(rows, schema=schema, orient="row", strict=True))

        try:
            self._run(sql, what, collect)
        except sqlite3.Error as exc:
            raise TraceError(self.path, f"corrupt SQLite file: {_first_line(exc)} (reading {what})") from None
        except (TypeError, OverflowError, pl.exceptions.PolarsError) as exc:
            problem = _misfit(rows, schema) or _first_line(exc)
            raise TraceError(self.path, f"unexpected value in the {what} records: {problem}") from None
        if not parts:
            return pl.DataFrame(schema=schema)
        return pl.concat(parts, how="vertical")


_PYTHON_TYPES: dict[type[pl.DataType], tuple[type, ...]] = {
    pl.Int64: (int,),
    pl.Float64: (int, float),
    pl.String: (str,),
}


def _misfit(rows: list[tuple[Any, ...]], schema: dict[str, pl.DataType]) -> str | None:
    """Name the column and value that do not fit (error path only).

    SQLite columns are dynamically typed, so a damaged or hand-edited file
    can hold text where nsys writes integers.
    """
    for i, (name, dtype) in enumerate(schema.items()):
        expected = _PYTHON_TYPES.get(type(dtype))
        if expected is None:
            continue
        for row in rows:
            value = row[i]
            if value is not None and (not isinstance(value, expected) or isinstance(value, bool)):
                shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
                return f"{name} is {shown} ({type(value).__name__}), expected {dtype}"
    return None


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__
