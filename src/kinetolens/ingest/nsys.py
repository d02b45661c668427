"""Read an Nsight Systems SQLite export (``nsys export --type sqlite``).

The result is the same :class:`RawTables` the Kineto reader returns, so the
model and every report work unchanged: kernels, memcpy and memset are device
rows, CUDA runtime/driver calls are ``runtime`` host rows joined to them by
correlation id, NVTX ranges are annotations (or ops) on their thread.  Times
stay the integer nanoseconds nsys stored.

The schema is recognised by its tables and columns, never by the nsys
version that wrote it (see ``docs/formats.md`` for the variants handled).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl

from kinetolens.errors import TraceError, TraceWarning
from kinetolens.ingest.kineto import (
    COUNTER_SCHEMA,
    FLOW_SCHEMA,
    MEMORY_SCHEMA,
    RawTables,
)
from kinetolens.ingest.nsys_db import Database, check_header, quote
from kinetolens.ingest.nsys_gpu import (
    GPU_TABLES,
    device_properties,
    read_gpu,
    to_device_rows,
)
from kinetolens.ingest.nsys_host import (
    NSYS_HOST_SCHEMA,
    NVTX_TABLE,
    RUNTIME_TABLE,
    nvtx_host_rows,
    read_nvtx,
    read_processes,
    read_runtime,
    read_threads,
    runtime_host_rows,
)
from kinetolens.ingest.plausible import plausible_devices

FORMAT = "nsys-sqlite"
#: Tables only an nsys export has; one of them identifies the file.
_NSYS_MARKERS = (
    *GPU_TABLES,
    RUNTIME_TABLE,
    NVTX_TABLE,
    "TARGET_INFO_SESSION_START_TIME",
    "EXPORT_META_DATA",
    "META_DATA_EXPORT",
    "ThreadNames",
)
#: Correlation ids count per process; with several processes in one report
#: each gets its own range of ids (process index in the bits above these).
_CORRELATION_BITS = 40
_MPI_RANK = re.compile(r"^MPI Rank (\d+)$")


def read_nsys(path: str | Path) -> RawTables:
    """Decode an nsys SQLite export into raw tables (one-line TraceError if unusable)."""
    p = Path(path)
    check_header(p)
    db = Database(p)
    try:
        _check_tables(db)
        return _read(db)
    finally:
        db.close()


def _check_tables(db: Database) -> None:
    tables = sorted(db.columns)
    if not tables:
        raise TraceError(db.path, "an empty SQLite database (no tables), not an Nsight Systems export")
    if not any(t in db.columns for t in _NSYS_MARKERS):
        shown = ", ".join(tables[:6]) + (f" and {len(tables) - 6} more" if len(tables) > 6 else "")
        raise TraceError(
            db.path,
            "an SQLite database but not an Nsight Systems export "
            f"(no CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS or ThreadNames tables; it has {shown})",
        )
    for table in (*GPU_TABLES, RUNTIME_TABLE, NVTX_TABLE):
        if table in db.columns and not db.has(table, "start", "end"):
            raise TraceError(db.path, f"SQLite table {table} has no 'start'/'end' columns")


def _valid() -> pl.Expr:
    """Rows with a usable time span (nsys leaves ``end`` null for open ranges)."""
    return pl.col("ts").is_not_null() & pl.col("end").is_not_null() & (pl.col("end") >= pl.col("ts"))


def _separate_correlations(gpu: pl.DataFrame, runtime: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Keep correlation ids of different processes apart (ids are per process).

    With one process (the usual case) the ids stay exactly as nsys wrote them.
    """
    procs = pl.concat([gpu["proc"], runtime["proc"]]).drop_nulls().unique().sort()
    if procs.len() <= 1:
        return gpu, runtime
    index = pl.DataFrame({"proc": procs, "_p": pl.int_range(procs.len(), eager=True, dtype=pl.Int64)})

    def shift(frame: pl.DataFrame) -> pl.DataFrame:
        return (
            frame.join(index, on="proc", how="left")
            .with_columns(correlation=pl.col("_p") * (1 << _CORRELATION_BITS) + pl.col("correlation"))
            .drop("_p")
        )

    return shift(gpu), shift(runtime)


def _read(db: Database) -> RawTables:
    warnings: list[TraceWarning] = []
    gpu = read_gpu(db)
    runtime, _repeats = read_runtime(db)
    nvtx = read_nvtx(db)

    bad = gpu.filter(~_valid()).height + runtime.filter(~_valid()).height
    unclosed = nvtx.filter(pl.col("end").is_null() & pl.col("ts").is_not_null()).height
    bad += nvtx.filter(~_valid()).height - unclosed
    gpu, runtime, nvtx = gpu.filter(_valid()), runtime.filter(_valid()), nvtx.filter(_valid())
    if bad:
        warnings.append(TraceWarning("records without a valid time span skipped", bad, "missing start/end or end before start"))
    if unclosed:
        warnings.append(TraceWarning("NVTX ranges never closed", unclosed, "skipped: no end time"))
    if gpu.height == 0:
        warnings.append(
            TraceWarning("no GPU activity", 1, "no CUDA kernel, memcpy or memset records (captured without -t cuda?)")
        )
    gpu, runtime = _separate_correlations(gpu, runtime)

    devices, device_warning = plausible_devices(device_properties(db))
    if device_warning is not None:
        warnings.append(device_warning)
    procs = pl.concat([gpu["proc"], runtime["proc"], nvtx["proc"]])
    host = pl.concat([runtime_host_rows(runtime), nvtx_host_rows(nvtx)], how="vertical")
    threads = read_threads(db)
    metadata: dict[str, Any] = {"deviceProperties": devices, "nsys": _export_info(db)}
    if db.replaced:
        warnings.append(
            TraceWarning(
                "invalid text replaced",
                db.replaced,
                f"text that is not valid UTF-8 in the {', '.join(db.replaced_in)} records replaced with U+FFFD",
            )
        )
    rank = _mpi_rank(threads)
    if rank is not None:
        metadata["distributedInfo"] = {"rank": rank}
    return RawTables(
        format=FORMAT,
        metadata=metadata,
        host=host.select([pl.col(n).cast(t) for n, t in NSYS_HOST_SCHEMA.items()]),
        device=to_device_rows(gpu, devices),
        memory=pl.DataFrame(schema=MEMORY_SCHEMA),
        flows=pl.DataFrame(schema=FLOW_SCHEMA),
        threads=threads,
        processes=read_processes(db, procs),
        counters=pl.DataFrame(schema=COUNTER_SCHEMA),
        warnings=warnings,
    )


def _export_info(db: Database) -> dict[str, Any]:
    """Which nsys wrote the file, and when the session started (UTC ns)."""
    info: dict[str, Any] = {}
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if db.has(table, "name", "value"):
            rows = dict(db.rows(f"SELECT name, value FROM {quote(table)}", table))
            for key, out in (("EXPORT_PRODUCT_VERSION", "productVersion"), ("EXPORT_SCHEMA_VERSION", "schemaVersion")):
                if isinstance(rows.get(key), str):
                    info[out] = rows[key]
    if db.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        start = db.scalar("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME", "session start")
        if isinstance(start, int):
            info["sessionStartUtcNs"] = start
    return info


def _mpi_rank(threads: pl.DataFrame) -> int | None:
    """nsys names the main thread ``MPI Rank N`` when it traced MPI."""
    ranks = {int(m.group(1)) for n in threads["name"].to_list() if n and (m := _MPI_RANK.match(n))}
    return ranks.pop() if len(ranks) == 1 else None
