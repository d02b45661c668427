"""Decode a Kineto trace to Parquet files, holding a bounded part of it at a time.

A trace larger than memory cannot be held as tables, but most questions are
asked of a window of it: one step, its GPU tail and the launches before it.
This reader decodes the file piece by piece as the streaming reader does
(:mod:`kinetolens.ingest.kineto_stream`) and writes each table's frames to a
Parquet part whenever they hold :data:`PART_BYTES`, so memory holds at most
one part per table.  :meth:`Spill.window` reads a window of time back as
:class:`RawTables`, the same rows, in file order, that the whole-file
readers give for those events.

Kineto writes events in roughly time order, so the parts' row groups each
cover a short span: a window's scan filters on ``ts`` and ``end`` and the
row groups' statistics skip the rest of the file.  Threads and processes
(one row per thread) stay in memory.

The checks the whole readers make hold here too: an end time that does not
fit 64 bits is an error, events without a duration are an error, and events
timed far from the rest are left out of every window and counted
(:mod:`kinetolens.ingest.plausible`, the median start taken over the parts).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kinetolens.errors import TraceWarning
from kinetolens.ingest.kineto import TABLES, RawTables, check_end, decoded_chunks, no_usable_events, skipped_warnings
from kinetolens.ingest.kineto_columns import ArgsInvalid
from kinetolens.ingest.kineto_stream import PIECE_BYTES, Pieces
from kinetolens.ingest.opener import StreamUnsupported, file_blocks
from kinetolens.ingest.plausible import (
    TIMED_TABLES,
    check_device_properties,
    check_distributed_info,
    far_off_example,
    far_off_warning,
    plausible,
)

#: Frames a table gathers in memory (their estimated size) before they are written as one part.
PART_BYTES = 64 << 20
#: Rows per Parquet row group: small enough that a window's scan skips most of a part.
ROW_GROUP_ROWS = 32_768
#: Tables held in memory whole (a row per thread or process).
HELD = ("threads", "processes")
#: Tables of time ranges: they get an ``end`` column, so a window's scan can skip by it.
RANGES = ("host", "device")


@dataclass(frozen=True)
class Part:
    """One Parquet file of a table, and the times its rows span (ns; null where none has one)."""

    name: str
    first: int | None
    last: int | None

    def meets(self, lo: int | None, hi: int | None) -> bool:
        """Whether the part may hold a row timed in ``[lo, hi)`` (a part without times may)."""
        if self.first is None or self.last is None:
            return True
        return (hi is None or self.first < hi) and (lo is None or self.last >= lo)


@dataclass
class Spill:
    """A trace decoded to Parquet parts in ``directory``."""

    directory: Path
    format: str
    metadata: dict[str, Any]
    warnings: list[TraceWarning]
    parts: dict[str, list[Part]]
    held: dict[str, pl.DataFrame]
    #: The trace's median start (ns): events far from it are in no window (see :mod:`.plausible`).
    median_start: int | None = None
    rows: dict[str, int] = field(default_factory=dict)
    #: Correlation ids of GPU activities whose launch the file does not hold (looked for once).
    unlaunched: set[int] = field(default_factory=set, repr=False)

    def scan(self, table: str, lo: int | None = None, hi: int | None = None) -> pl.LazyFrame:
        """Every plausible row of ``table`` (with ``end`` for ranges), in file
        order; with ``lo``/``hi``, read from the parts that hold times in
        ``[lo, hi)`` only (the caller still filters the rows)."""
        schema = {**TABLES[table], **({"end": pl.Int64()} if table in RANGES else {})}
        files = [str(self.directory / part.name) for part in self.parts.get(table, []) if part.meets(lo, hi)]
        return self._plausible(pl.scan_parquet(files), table) if files else pl.LazyFrame(schema=schema)

    def _plausible(self, frame: pl.LazyFrame, table: str) -> pl.LazyFrame:
        if self.median_start is not None and table in TIMED_TABLES:
            return frame.filter(plausible(self.median_start, table in RANGES))
        return frame

    def time_range(self) -> tuple[int, int]:
        """The first start and the last end (ns) of the plausible ranges."""
        ends = [self.scan(t).select(lo=pl.col("ts").min(), hi=pl.col("end").max()) for t in RANGES if self.parts.get(t)]
        both = pl.concat(ends).select(pl.col("lo").min(), pl.col("hi").max()).collect().row(0)
        return int(both[0]), int(both[1])

    def each_part(self, table: str, columns: list[str | pl.Expr], where: pl.Expr | None = None) -> Iterator[pl.DataFrame]:
        """``columns`` of ``table``'s plausible rows (``where`` they hold), a part at a time, in file order."""
        for part in self.parts.get(table, []):
            frame = self._plausible(pl.scan_parquet(self.directory / part.name), table)
            if where is not None:
                frame = frame.filter(where)
            yield frame.select(columns).collect()

    def window(self, lo: int, hi: int, launches_from: int | None = None) -> RawTables:
        """The events of ``[lo, hi)`` (ns) as raw tables: ranges overlapping it,
        instants in it, and the host events from where the first launch of a
        GPU activity overlapping it happened (looked for from ``launches_from``,
        default ``lo``), so that those activities keep their launches and ops."""
        overlapping = (pl.col("ts") < hi) & (pl.col("end") >= lo)
        device = self.scan("device", lo, hi).filter(overlapping).collect()
        start = min(lo, self._first_launch(device["correlation"], lo if launches_from is None else launches_from, hi))
        host = self.scan("host", start, hi).filter((pl.col("ts") < hi) & (pl.col("end") >= start)).collect()
        instants = {
            name: self.scan(name, start, hi + 1).filter(pl.col("ts").is_between(start, hi)).collect()
            for name in ("memory", "flows", "counters")
        }
        return RawTables(
            format=self.format,
            metadata=json.loads(json.dumps(self.metadata)),
            host=host.drop("end"),
            device=device.drop("end"),
            threads=self.held["threads"],
            processes=self.held["processes"],
            warnings=list(self.warnings),
            **instants,
        )

    def _first_launch(self, correlations: pl.Series, since: int, hi: int) -> int:
        """The earliest host event carrying one of ``correlations`` (their launches),
        looked for from ``since`` (the statistics skip the rest of the file);
        launches not found there are looked for in the whole file, so that every
        GPU activity in a window has its launch if the file has it."""
        wanted = correlations.drop_nulls().unique()
        if wanted.len() == 0:
            return hi
        near = (
            self.scan("host", since, hi)
            .filter((pl.col("ts") >= since) & (pl.col("ts") < hi) & pl.col("correlation").is_in(wanted.implode()))
            .select("correlation", "ts")
            .collect()
        )
        found = [near]
        missing = wanted.filter(~wanted.is_in(near["correlation"].implode()) & ~wanted.is_in(list(self.unlaunched)))
        if missing.len():
            # Launched long before, or never recorded (remembered, so the file is searched once for each).
            far = self.scan("host").filter(pl.col("correlation").is_in(missing.implode())).select("correlation", "ts").collect()
            self.unlaunched.update(missing.filter(~missing.is_in(far["correlation"].implode())).to_list())
            found.append(far)
        first = pl.concat(found)["ts"].min()
        return int(first) if first is not None else hi  # type: ignore[arg-type]


def spill_kineto(path: Path, directory: Path) -> Spill:
    """Decode the Kineto JSON(.gz) file ``path`` into Parquet parts in ``directory``.

    Raises :class:`StreamUnsupported` for a file the streaming reader does not
    take (damaged, unusual): the whole-file reader is then the one to read it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    writer = _PartWriter(str(path), directory)
    pieces = Pieces(file_blocks(path, PIECE_BYTES))
    skipped: Counter[str] = Counter()
    try:
        for frames in decoded_chunks(str(path), pieces, skipped):
            for table, frame in frames.items():
                writer.add(table, frame)
    except ArgsInvalid:
        raise StreamUnsupported("args of an event do not decode") from None
    except UnicodeDecodeError:
        raise StreamUnsupported("text that is not valid Unicode") from None
    finally:
        close = getattr(pieces.blocks, "close", None)
        if close is not None:
            close()
    writer.flush_all()
    # The metadata's checks, once for the file (on tables of no rows: they read the metadata only).
    checked = check_distributed_info(check_device_properties(RawTables(
        format="kineto-json", metadata=pieces.metadata, warnings=skipped_warnings(skipped),
        **{name: pl.DataFrame(schema=schema) for name, schema in TABLES.items()},
    )))  # fmt: skip
    spill = Spill(
        directory=directory,
        format="kineto-json",
        metadata=checked.metadata,
        warnings=checked.warnings,
        parts=writer.parts,
        held={name: writer.held_table(name) for name in HELD},
        rows={name: writer.rows[name] for name in TABLES},
    )
    if not any(spill.rows.get(name) for name in TIMED_TABLES):
        raise no_usable_events(str(path), skipped)
    return _with_plausible_times(spill, str(path))


def _with_plausible_times(spill: Spill, path: str) -> Spill:
    """``spill`` with its median start set and the far-off events counted (:func:`~.plausible.drop_far_off_events`)."""
    starts = [spill.scan(name).select("ts") for name in RANGES if spill.parts.get(name)]
    if not starts:
        return spill
    mid = pl.concat(starts).select(pl.col("ts").drop_nulls().median()).collect().item()
    if mid is None:
        return spill
    mid = int(mid)
    dropped, kept, example = 0, 0, ""
    for name in TIMED_TABLES:
        if not spill.parts.get(name):
            continue
        far = spill.scan(name).filter(~plausible(mid, name in RANGES))  # every row: no median set yet
        n = far.select(pl.len()).collect().item()
        if n and not example:
            example = far_off_example(name, far.head(1).collect().row(0, named=True), mid)
        dropped += n
        kept += spill.rows[name] - n
    spill = dataclasses.replace(spill, median_start=mid)
    if dropped:
        spill.warnings.append(far_off_warning(path, dropped, kept, example))
    return spill


class _PartWriter:
    """Gathers each table's frames and writes them as numbered Parquet parts."""

    def __init__(self, path: str, directory: Path) -> None:
        self.path = path
        self.directory = directory
        self.pending: dict[str, list[pl.DataFrame]] = {name: [] for name in TABLES}
        self.size: Counter[str] = Counter()
        self.rows: Counter[str] = Counter()
        self.parts: dict[str, list[Part]] = {name: [] for name in TABLES if name not in HELD}

    def add(self, table: str, frame: pl.DataFrame) -> None:
        self.pending[table].append(frame)
        self.rows[table] += frame.height
        if table in HELD:
            return
        self.size[table] += frame.estimated_size()
        if self.size[table] >= PART_BYTES:
            self.flush(table)

    def flush(self, table: str) -> None:
        frames, self.pending[table], self.size[table] = self.pending[table], [], 0
        if not frames:
            return
        frame = pl.concat(frames, how="vertical")
        if table in RANGES:
            check_end(self.path, table, frame)
            frame = frame.with_columns(end=pl.col("ts") + pl.col("dur"))
        name = f"{table}-{len(self.parts[table]):05d}.parquet"
        last = "end" if table in RANGES else "ts"
        first_ts, last_ts = frame.select(first=pl.col("ts").min(), last=pl.col(last).max()).row(0)
        frame.write_parquet(self.directory / name, compression="lz4", row_group_size=ROW_GROUP_ROWS, statistics=True)
        self.parts[table].append(Part(name, first_ts, last_ts))

    def flush_all(self) -> None:
        for table in self.parts:
            self.flush(table)

    def held_table(self, table: str) -> pl.DataFrame:
        frames = self.pending[table]
        frame = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=TABLES[table])
        return frame.unique(maintain_order=True) if table == "threads" else frame
