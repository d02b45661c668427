"""GPU side of an Nsight Systems export: kernels, memcpy, memset, devices.

Rows keep the shape of Kineto's device events (``DEVICE_SCHEMA``) so the
model links them unchanged: ``pid`` is the device and ``tid`` the stream, as
Kineto writes them, and names read like Kineto's (``Memcpy HtoD (Pageable ->
Device)``) so reports look the same whichever profiler recorded the trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from kinetolens.ingest.categories import KERNEL, MEMCPY, MEMSET
from kinetolens.ingest.kineto import DEVICE_SCHEMA
from kinetolens.ingest.nsys_db import Database, quote

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
GPU_TABLES = (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE)

#: CUPTI's copy kinds (``copyKind``), as Kineto abbreviates them.
COPY_KINDS: dict[int, str] = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD (Unified)", 12: "DtoH (Unified)", 13: "DtoD (Unified)",
}
#: nsys's memory kinds (``srcKind``/``dstKind``/``memKind``); nsys numbers them
#: from 0 = pageable, unlike CUPTI.  Used when the file has no ENUM table.
MEM_KINDS: dict[int, str] = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
    6: "Managed Static", 7: "Unknown",
}

#: Columns of the intermediate GPU query, before names are composed, in
#: SELECT order (rows are matched to it by position).
_QUERY_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "proc": pl.Int64(),
    "ts": pl.Int64(),
    "end": pl.Int64(),
    "device": pl.Int64(),
    "stream": pl.Int64(),
    "context": pl.Int64(),
    "correlation": pl.Int64(),
    "name": pl.String(),
    "grid_x": pl.Int64(),
    "grid_y": pl.Int64(),
    "grid_z": pl.Int64(),
    "block_x": pl.Int64(),
    "block_y": pl.Int64(),
    "block_z": pl.Int64(),
    "registers_per_thread": pl.Int64(),
    "shared_memory": pl.Int64(),
    "bytes": pl.Int64(),
    "copy_kind": pl.Int64(),
    "src_kind": pl.Int64(),
    "dst_kind": pl.Int64(),
    "graph_id": pl.Int64(),
    "graph_node": pl.Int64(),
}


def _common(db: Database, table: str, kind: str) -> list[str]:
    c = lambda col: db.col(table, "t", col)
    proc, _ = db.process(table, "t")
    return [
        f"'{kind}' AS kind",
        f"{proc} AS proc",
        f"{c('start')} AS ts",
        f"{c('end')} AS \"end\"",
        f"{c('deviceId')} AS device",
        f"{c('streamId')} AS stream",
        f"{c('contextId')} AS context",
        f"{c('correlationId')} AS correlation",
    ]


def _graph_columns(c: Callable[[str], str]) -> list[str]:
    """The CUDA graph and graph node a replayed activity ran as (NULL for eager work)."""
    return [f"{c('graphId')} AS graph_id", f"{c('graphNodeId')} AS graph_node"]


def _kernel_sql(db: Database) -> str:
    t = KERNEL_TABLE
    c = lambda col: db.col(t, "t", col)
    joins: list[str] = []
    name = db.text(t, "t", ["demangledName", "shortName", "mangledName", "name"], joins)
    shared = [c(x) for x in ("staticSharedMemory", "dynamicSharedMemory") if db.has(t, x)]
    smem = " + ".join(f"COALESCE({x}, 0)" for x in shared) if shared else "NULL"
    cols = _common(db, t, KERNEL) + [
        f"{name} AS name",
        *(f"{c(n)} AS {a}" for n, a in (
            ("gridX", "grid_x"), ("gridY", "grid_y"), ("gridZ", "grid_z"),
            ("blockX", "block_x"), ("blockY", "block_y"), ("blockZ", "block_z"),
            ("registersPerThread", "registers_per_thread"),
        )),
        f"{smem} AS shared_memory",
        "NULL AS bytes", "NULL AS copy_kind", "NULL AS src_kind", "NULL AS dst_kind",
        *_graph_columns(c),
    ]
    return f"SELECT {', '.join(cols)} FROM {quote(t)} AS t {' '.join(joins)}"


def _copy_sql(db: Database, table: str, kind: str) -> str:
    c = lambda col: db.col(table, "t", col)
    dims = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread", "shared_memory"]
    src = c("srcKind") if kind == MEMCPY else c("memKind")
    cols = _common(db, table, kind) + [
        "NULL AS name",
        *(f"NULL AS {d}" for d in dims),
        f"{c('bytes')} AS bytes",
        f"{c('copyKind')} AS copy_kind",
        f"{src} AS src_kind",
        f"{c('dstKind')} AS dst_kind",
        *_graph_columns(c),
    ]
    return f"SELECT {', '.join(cols)} FROM {quote(table)} AS t"


def _enum_labels(db: Database, table: str, fallback: dict[int, str]) -> pl.DataFrame:
    """id -> label from the file's ENUM table where it has one."""
    labels = dict(fallback)
    if db.has(table, "id", "label"):
        rows = db.rows(f"SELECT id, label FROM {quote(table)}", table)
        labels.update({i: lab for i, lab in rows if isinstance(i, int) and isinstance(lab, str) and lab})
    return pl.DataFrame({"id": list(labels), "label": list(labels.values())}, schema={"id": pl.Int64(), "label": pl.String()})


def _copy_names(db: Database, gpu: pl.DataFrame) -> pl.DataFrame:
    """``Memcpy HtoD (Pageable -> Device)`` / ``Memset (Device)``, as Kineto names them."""
    copies = pl.DataFrame(
        {"id": list(COPY_KINDS), "copy": list(COPY_KINDS.values())}, schema={"id": pl.Int64(), "copy": pl.String()}
    )
    mem = _enum_labels(db, "ENUM_CUDA_MEM_KIND", MEM_KINDS)
    gpu = (
        gpu.join(copies, left_on="copy_kind", right_on="id", how="left")
        .join(mem.rename({"id": "src_kind", "label": "src"}), on="src_kind", how="left")
        .join(mem.rename({"id": "dst_kind", "label": "dst"}), on="dst_kind", how="left")
    )
    memcpy = pl.concat_str(
        [
            pl.lit("Memcpy "),
            pl.col("copy").fill_null("Unknown"),
            pl.lit(" ("),
            pl.col("src").fill_null("Unknown"),
            pl.lit(" -> "),
            pl.col("dst").fill_null("Unknown"),
            pl.lit(")"),
        ]
    )
    memset = pl.concat_str([pl.lit("Memset ("), pl.col("src").fill_null("Unknown"), pl.lit(")")])
    return gpu.with_columns(
        name=pl.when(pl.col("kind") == MEMCPY)
        .then(memcpy)
        .when(pl.col("kind") == MEMSET)
        .then(memset)
        .otherwise(pl.col("name").fill_null("(unnamed kernel)"))
    ).drop("copy", "src", "dst")


def read_gpu(db: Database) -> pl.DataFrame:
    """Kernels, memcpy and memset rows with ``proc`` (the process key) added.

    Rows without a start or end are kept for the caller to count and drop.
    """
    queries = []
    if db.has(KERNEL_TABLE, "start", "end"):
        queries.append(_kernel_sql(db))
    if db.has(MEMCPY_TABLE, "start", "end"):
        queries.append(_copy_sql(db, MEMCPY_TABLE, MEMCPY))
    if db.has(MEMSET_TABLE, "start", "end"):
        queries.append(_copy_sql(db, MEMSET_TABLE, MEMSET))
    if not queries:
        return pl.DataFrame(schema=_QUERY_SCHEMA)
    gpu = db.frame(" UNION ALL ".join(queries), _QUERY_SCHEMA, "GPU activity")
    return _copy_names(db, gpu)


def to_device_rows(gpu: pl.DataFrame, devices: list[dict[str, Any]]) -> pl.DataFrame:
    """The ``DEVICE_SCHEMA`` frame Kineto's reader would produce.

    Blocks and warps per SM are derived as Kineto derives them, from the
    device's SM count, so the per-kernel report shows them for nsys too.
    """
    sms = pl.DataFrame(
        {
            "device": [d["id"] for d in devices],
            "_sms": [d.get("numSms") for d in devices],
            "_warp": [d.get("warpSize") for d in devices],
        },
        schema={"device": pl.Int64(), "_sms": pl.Int64(), "_warp": pl.Int64()},
    ).unique(subset=["device"], keep="first")
    blocks = pl.col("grid_x") * pl.col("grid_y") * pl.col("grid_z")
    threads = pl.col("block_x") * pl.col("block_y") * pl.col("block_z")
    per_sm = blocks.cast(pl.Float64) / pl.col("_sms")
    rows = gpu.join(sms, on="device", how="left").with_columns(
        cat=pl.col("kind").replace_strict(
            {KERNEL: "kernel", MEMCPY: "gpu_memcpy", MEMSET: "gpu_memset"}, default="kernel"
        ),
        pid=pl.col("device"),
        tid=pl.col("stream"),
        dur=pl.col("end") - pl.col("ts"),
        external_id=pl.lit(None, pl.Int64),
        queued=pl.lit(None, pl.Int64),
        blocks_per_sm=pl.when(pl.col("kind") == KERNEL).then(per_sm),
        warps_per_sm=pl.when(pl.col("kind") == KERNEL).then(
            per_sm * threads.cast(pl.Float64) / pl.col("_warp").fill_null(32)
        ),
        occupancy=pl.lit(None, pl.Float64),
        memory_bw_gbps=pl.lit(None, pl.Float64),  # nsys durations are exact ns
    )
    return rows.select([pl.col(n).cast(t) for n, t in DEVICE_SCHEMA.items()])


_GPU_PROPERTIES = {
    # TARGET_INFO_GPU column -> Kineto deviceProperties key
    "name": "name",
    "totalMemory": "totalGlobalMem",
    "computeMajor": "computeMajor",
    "computeMinor": "computeMinor",
    "maxThreadsPerBlock": "maxThreadsPerBlock",
    "maxRegistersPerBlock": "regsPerBlock",
    "maxRegistersPerSm": "regsPerMultiprocessor",
    "threadsPerWarp": "warpSize",
    "maxShmemPerBlock": "sharedMemPerBlock",
    "maxShmemPerSm": "sharedMemPerMultiprocessor",
    "smCount": "numSms",
    "maxShmemPerBlockOptin": "sharedMemPerBlockOptin",
    "busLocation": "busLocation",
    "uuid": "uuid",
    "chipName": "chipName",
    "clockRate": "clockRate",
    "memoryBandwidth": "memoryBandwidth",
    "l2CacheSize": "l2CacheSize",
}


def device_properties(db: Database) -> list[dict[str, Any]]:
    """Kineto-style ``deviceProperties`` from ``TARGET_INFO_GPU``.

    ``id`` is the CUDA device ordinal, the number kernels carry in
    ``deviceId``: ``TARGET_INFO_CUDA_DEVICE`` maps it to the GPU where the
    file has that table, else ``cuDevice`` is the ordinal, else nsys's own
    GPU id is all there is.
    """
    t = "TARGET_INFO_GPU"
    if not db.has(t, "id"):
        return []
    present = [col for col in _GPU_PROPERTIES if db.has(t, col)]
    select = ", ".join(f"g.{quote(col)}" for col in present)
    if db.has("TARGET_INFO_CUDA_DEVICE", "gpuId", "cudaId"):
        ordinal = "(SELECT min(d.cudaId) FROM TARGET_INFO_CUDA_DEVICE AS d WHERE d.gpuId = g.id)"
    elif db.has(t, "cuDevice"):
        ordinal = "g.cuDevice"
    else:
        ordinal = "g.id"
    sql = f"SELECT COALESCE({ordinal}, g.id), g.id{', ' + select if select else ''} FROM {quote(t)} AS g"
    keys = ["id", "nsysGpuId"] + [_GPU_PROPERTIES[col] for col in present]
    out = [{k: v for k, v in zip(keys, row) if v is not None} for row in db.rows(sql, t)]
    # Values go into JSON metadata (and the cache): keep JSON's scalar types.
    out = [{k: v for k, v in d.items() if isinstance(v, (int, float, str))} for d in out]
    return sorted((d for d in out if isinstance(d.get("id"), int)), key=lambda d: d["id"])
