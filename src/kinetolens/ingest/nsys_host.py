"""Host side of an Nsight Systems export: CUDA API calls, NVTX ranges, names.

CUDA runtime/driver calls become ``runtime`` rows carrying ``correlation``,
which is what links each kernel to its launch.  NVTX push/pop and start/end
ranges become ``op`` rows on their thread, so the model's existing
containment linking attributes every launch to the innermost NVTX range
around it, and ``kinetolens ops`` sums GPU time per NVTX range (what nsys
calls the NVTX GPU projection).  ``ProfilerStep#N`` ranges stay annotations,
as in Kineto, so they still delimit steps.  Ranges written by
``torch.autograd.profiler.emit_nvtx`` (``aten::mm, seq = 12, op_id = 3,
sizes = [[2, 3], [3, 4]]``) have their name, sequence number and shapes
split out, so forward/backward linking works for them too.  Ranges written by
``kinetolens.nvtx`` (op markers and module ranges) are applied on top, see
:mod:`kinetolens.ingest.nsys_markers`; they fill the ``module`` and
``source`` columns (``ATTRIBUTION_SCHEMA``) that nsys host rows carry beside
the Kineto host columns.
"""

from __future__ import annotations

import polars as pl

from kinetolens.ingest.categories import ANNOTATION, OP, RUNTIME
from kinetolens.ingest.kineto import HOST_SCHEMA, PROCESS_SCHEMA, THREAD_SCHEMA
from kinetolens.ingest.nsys_db import Database, quote
from kinetolens.ingest.nsys_markers import has_markers, resolve_markers
from kinetolens.registry.trace_names import STEP_PREFIX


RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
#: ``eventClass`` of CUDA runtime and driver API rows.  Other classes in the
#: runtime table (CUDA backtrace, 67) repeat a call whose stack was sampled.
RUNTIME_CLASS, DRIVER_CLASS = 0, 1
#: ``NVTX_EVENTS.eventType`` values (ENUM_NSYS_EVENT_TYPE).
NVTX_THREAD_NAME = 39
NVTX_PUSH_POP, NVTX_START_END = 59, 60
NVTX_DOMAIN_CREATE = 75
#: CUPTI names runtime calls with the CUDA version that introduced them
#: (``cudaLaunchKernel_v7000``); Kineto and nsys's own reports drop it.
_VERSION_SUFFIX = r"_v\d{4,}$"
_EMIT_NVTX = r", (?:seq|op_id) = \d+"

_RUNTIME_QUERY: dict[str, pl.DataType] = {
    "proc": pl.Int64(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts": pl.Int64(),
    "end": pl.Int64(),
    "event_class": pl.Int64(),
    "correlation": pl.Int64(),
    "name": pl.String(),
}
#: Module path and call site, which an nsys export can name only through
#: ``kinetolens.nvtx`` markers (Kineto traces get them from Python frames).
ATTRIBUTION_SCHEMA: dict[str, pl.DataType] = {"module": pl.String(), "source": pl.String()}
#: Host rows of an nsys export: Kineto's host columns plus the attribution.
NSYS_HOST_SCHEMA: dict[str, pl.DataType] = {**HOST_SCHEMA, **ATTRIBUTION_SCHEMA}

_NVTX_QUERY: dict[str, pl.DataType] = {
    "proc": pl.Int64(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts": pl.Int64(),
    "end": pl.Int64(),
    "domain": pl.Int64(),
    "name": pl.String(),
}


def conform(frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Exactly ``schema``'s columns in its order; absent ones are null."""
    return frame.select(
        [(pl.col(n) if n in frame.columns else pl.lit(None)).cast(t).alias(n) for n, t in schema.items()]
    )


def read_runtime(db: Database) -> tuple[pl.DataFrame, int]:
    """CUDA API calls with ``proc``; returns the rows and how many repeats were dropped.

    Some nsys versions write a call twice when its backtrace was captured:
    once as the CUPTI record and once as a "CUDA backtrace" row with the same
    correlation id.  The CUPTI row is kept; a backtrace row without one
    stays, being the only record of its call.  Identical rows collapse.
    """
    t = RUNTIME_TABLE
    if not db.has(t, "start", "end"):
        return pl.DataFrame(schema={**_RUNTIME_QUERY, "cat": pl.String()}), 0
    joins: list[str] = []
    name = db.text(t, "t", ["nameId", "name"], joins)
    proc, pid, tid = db.thread(t, "t")
    c = lambda col: db.col(t, "t", col)
    sql = (
        f"SELECT {proc}, {pid}, {tid}, {c('start')}, {c('end')}, {c('eventClass')}, {c('correlationId')}, {name} "
        f"FROM {quote(t)} AS t {' '.join(joins)}"
    )
    rows = db.frame(sql, _RUNTIME_QUERY, "CUDA API")
    total = rows.height
    primary = pl.col("event_class").is_null() | pl.col("event_class").is_in([RUNTIME_CLASS, DRIVER_CLASS])
    keys = rows.filter(primary & pl.col("correlation").is_not_null()).select("proc", "correlation").unique()
    repeats = rows.filter(~primary).join(keys, on=["proc", "correlation"], how="anti")
    rows = pl.concat([rows.filter(primary), repeats]).unique(
        subset=["proc", "tid", "correlation", "ts", "end"], keep="first", maintain_order=True
    )
    name = pl.col("name").fill_null("(unnamed CUDA call)").str.replace(_VERSION_SUFFIX, "")
    driver = (pl.col("event_class") == DRIVER_CLASS) | (
        pl.col("event_class").is_in([RUNTIME_CLASS, DRIVER_CLASS]).not_()
        & ~name.str.starts_with("cuda")
        & name.str.starts_with("cu")
    )
    rows = rows.with_columns(
        name=name, cat=pl.when(driver.fill_null(False)).then(pl.lit("cuda_driver")).otherwise(pl.lit("cuda_runtime"))
    )
    return rows, total - rows.height


def runtime_host_rows(rows: pl.DataFrame) -> pl.DataFrame:
    return conform(rows.with_columns(kind=pl.lit(RUNTIME), dur=pl.col("end") - pl.col("ts")), NSYS_HOST_SCHEMA)


def read_nvtx(db: Database) -> pl.DataFrame:
    """NVTX ranges (unclosed ones have a null ``end``) with their domain name."""
    t = NVTX_TABLE
    if not db.has(t, "start", "end"):
        return pl.DataFrame(schema={**_NVTX_QUERY, "domain_name": pl.String()})
    joins: list[str] = []
    text = db.text(t, "t", ["text", "textId"], joins)
    proc, pid, tid = db.thread(t, "t")
    c = lambda col: db.col(t, "t", col)
    select = f"SELECT {proc}, {pid}, {tid}, {c('start')}, {c('end')}, {c('domainId')}, {text} FROM {quote(t)} AS t {' '.join(joins)}"
    if db.has(t, "eventType"):
        ranges = db.frame(f"{select} WHERE t.eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END})", _NVTX_QUERY, "NVTX")
        domains = db.frame(f"{select} WHERE t.eventType = {NVTX_DOMAIN_CREATE}", _NVTX_QUERY, "NVTX domain")
    else:
        ranges = db.frame(select, _NVTX_QUERY, "NVTX")
        domains = ranges.clear()
    names = domains.select("proc", "domain", domain_name="name").unique(subset=["proc", "domain"], keep="first")
    return ranges.join(names, on=["proc", "domain"], how="left", nulls_equal=True)


def nvtx_host_rows(ranges: pl.DataFrame) -> pl.DataFrame:
    """Closed NVTX ranges as ``op`` rows (``annotation`` for profiler steps).

    ``cat`` is ``nvtx`` or ``nvtx:<domain>`` so a report can tell an
    application's domains apart.  ``kinetolens.nvtx`` markers, where there
    are any, name ops, shapes, dtypes, modules and call sites
    (:func:`kinetolens.ingest.nsys_markers.resolve_markers`).
    """
    text = pl.col("name").fill_null("(unnamed NVTX range)")
    emitted = text.str.contains(_EMIT_NVTX)
    name = pl.when(emitted).then(text.str.replace(_EMIT_NVTX + ".*$", "")).otherwise(text)
    rows = conform(
        ranges.with_columns(
            kind=pl.when(name.str.starts_with(STEP_PREFIX)).then(pl.lit(ANNOTATION)).otherwise(pl.lit(OP)),
            cat=pl.when(pl.col("domain_name").is_not_null())
            .then(pl.lit("nvtx:") + pl.col("domain_name"))
            .otherwise(pl.lit("nvtx")),
            name=name,
            dur=pl.col("end") - pl.col("ts"),
            sequence_number=pl.when(emitted).then(text.str.extract(r", seq = (\d+)").cast(pl.Int64)),
            input_dims=pl.when(emitted).then(text.str.extract(r", sizes = (\[.*?\])(?:, input_op_ids = .*)?$")),
        ),
        NSYS_HOST_SCHEMA,
    )
    return resolve_markers(rows) if has_markers(rows["name"]) else rows


def read_threads(db: Database) -> pl.DataFrame:
    """Thread names: ``ThreadNames``, then names given with ``nvtxNameOsThread``."""
    parts: list[pl.DataFrame] = []
    if db.has("ThreadNames"):
        joins: list[str] = []
        name = db.text("ThreadNames", "t", ["nameId", "name"], joins)
        _, pid, tid = db.thread("ThreadNames", "t")
        parts.append(db.frame(f"SELECT {pid}, {tid}, {name} FROM ThreadNames AS t {' '.join(joins)}", THREAD_SCHEMA, "thread name"))
    if db.has(NVTX_TABLE, "eventType"):
        joins = []
        text = db.text(NVTX_TABLE, "t", ["text", "textId"], joins)
        _, pid, tid = db.thread(NVTX_TABLE, "t")
        parts.append(
            db.frame(
                f"SELECT {pid}, {tid}, {text} FROM {quote(NVTX_TABLE)} AS t {' '.join(joins)} "
                f"WHERE t.eventType = {NVTX_THREAD_NAME}",
                THREAD_SCHEMA,
                "NVTX thread name",
            )
        )
    if not parts:
        return pl.DataFrame(schema=THREAD_SCHEMA)
    return (
        pl.concat(parts)
        .filter(pl.col("name").is_not_null() & pl.col("tid").is_not_null())
        .unique(subset=["pid", "tid"], keep="first", maintain_order=True)
    )


def read_processes(db: Database, procs: pl.Series) -> pl.DataFrame:
    """Names of the processes that appear in the trace (``PROCESSES`` lists all)."""
    t = "PROCESSES"
    if not db.has(t, "pid", "name"):
        return pl.DataFrame(schema=PROCESS_SCHEMA)
    frame = db.frame(
        f"SELECT t.pid, t.name FROM {quote(t)} AS t", {"pid": pl.Int64(), "name": pl.String()}, "process name"
    )
    wanted = pl.DataFrame({"pid": procs.unique().drop_nulls()}, schema={"pid": pl.Int64()})
    return conform(frame.join(wanted, on="pid", how="semi").unique(subset=["pid"], keep="first"), PROCESS_SCHEMA)
