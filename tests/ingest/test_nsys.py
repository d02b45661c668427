"""Nsight Systems SQLite exports: real numbers, checked against SQL.

Every expected value is computed here with plain SQL on the same file, not
copied from a run of kinetolens, so a reader that drops, doubles or
misattributes a record fails.  The two fixtures come from different nsys
releases (2022.2, schema 2.9 with doubled runtime rows and NVTX; 2024.5,
schema 3.13 without NVTX).  Older/other schema variants are made by
rewriting copies of the real files the way those versions lay them out.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens import TraceError, TraceWarning
from tests.conftest import TRACES

NSYS = TRACES / "nsys"
CLOVERLEAF = NSYS / "pipit_perlmutter-cloverleaf-cuda.sqlite"
SAXPY = NSYS / "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
FIXTURES = [pytest.param(CLOVERLEAF, id="cloverleaf"), pytest.param(SAXPY, id="saxpy")]

# without ../shared these fail, never skip.

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"


# --------------------------------------------------------------------------- helpers


def sql(path: Path, query: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def one(path: Path, query: str):
    return sql(path, query)[0][0]


def load(path: Path) -> kinetolens.Trace:
    return kinetolens.load(path, cache=False)


def run_cli(command: str, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", POLARS_MAX_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", command, "--no-cache", *extra, str(path)],
        capture_output=True, text=True, timeout=120, env=env,
    )


def copy(src: Path, directory: Path, name: str | None = None) -> Path:
    dst = directory / (name or src.name)
    shutil.copyfile(src, dst)  # not copy(): the originals are read-only
    return dst


def rewrite(path: Path, *statements: str) -> Path:
    conn = sqlite3.connect(path)
    try:
        for s in statements:
            conn.execute(s)
        conn.commit()
    finally:
        conn.close()
    return path


def rebuild(table: str, select: str) -> tuple[str, ...]:
    """Statements that replace ``table`` with ``select`` (over the old table)."""
    return (
        f"CREATE TABLE _new AS {select.format(t=table)}",
        f"DROP TABLE {table}",
        f"ALTER TABLE _new RENAME TO {table}",
    )


def kernel_names_by_correlation(path: Path) -> dict[int, str]:
    return dict(
        sql(path, f"SELECT k.correlationId, s.value FROM {KERNEL} k JOIN StringIds s ON s.id = k.demangledName")
    )


def innermost_nvtx_of_kernels(path: Path) -> dict[int, str | None]:
    """Kernel correlation -> text of the innermost NVTX range around its launch.

    Innermost = the latest-starting push/pop or start/end range on the
    launching thread that is open when the launch starts.
    """
    rows = sql(
        path,
        f"""
        SELECT k.correlationId,
          (SELECT COALESCE(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
           WHERE n.eventType IN (59, 60) AND n.globalTid = r.globalTid
             AND n.start <= r.start AND r.start < n."end"
           ORDER BY n.start DESC, n."end" ASC LIMIT 1)
        FROM {KERNEL} k JOIN {RUNTIME} r ON r.correlationId = k.correlationId AND r.eventClass = 0
        """,
    )
    return dict(rows)


# --------------------------------------------------------------------------- real numbers


@pytest.mark.parametrize("path", FIXTURES)
def test_gpu_activity_matches_sql(path: Path) -> None:
    t = load(path)
    k = t.kernels
    kernels = k.filter(pl.col("kind") == "kernel")
    n, total_ns = sql(path, f'SELECT count(*), sum("end" - start) FROM {KERNEL}')[0]
    assert kernels.height == n and n > 0
    assert kernels["dur"].sum() == total_ns
    # Exact integer nanoseconds, record by record.
    want = sorted(sql(path, f'SELECT correlationId, start, "end" - start FROM {KERNEL}'))
    got = sorted(kernels.select("correlation", "ts", "dur").iter_rows())
    assert got == want
    memcpy = k.filter(pl.col("kind") == "memcpy")
    m_n, m_bytes, m_ns = sql(path, f'SELECT count(*), sum(bytes), sum("end" - start) FROM {MEMCPY}')[0]
    assert (memcpy.height, memcpy["bytes"].sum(), memcpy["dur"].sum()) == (m_n, m_bytes, m_ns)
    assert k.height == n + m_n  # neither fixture has memsets
    htod = one(path, f"SELECT sum(bytes) FROM {MEMCPY} WHERE copyKind = 1")
    assert memcpy.filter(pl.col("name").str.starts_with("Memcpy HtoD"))["bytes"].sum() == htod
    # Launch geometry as recorded.
    geometry = sorted(sql(path, f"SELECT correlationId, gridX, blockX, registersPerThread, streamId FROM {KERNEL}"))
    got_geometry = sorted(kernels.select("correlation", "grid_x", "block_x", "registers_per_thread", "stream").iter_rows())
    assert got_geometry == geometry


@pytest.mark.parametrize("path", FIXTURES)
def test_kernel_names_come_from_string_ids(path: Path) -> None:
    t = load(path)
    kernels = t.kernels.filter(pl.col("kind") == "kernel")
    assert dict(kernels.select("correlation", "name").iter_rows()) == kernel_names_by_correlation(path)


@pytest.mark.parametrize("path", FIXTURES)
def test_every_gpu_activity_is_linked_to_its_launch(path: Path) -> None:
    t = load(path)
    k = t.kernels
    assert k["launch_id"].null_count() == 0
    launches = dict(
        sql(
            path,
            f"""SELECT r.correlationId, s.value FROM {RUNTIME} r JOIN StringIds s ON s.id = r.nameId
                WHERE r.eventClass = 0 AND r.correlationId IN
                  (SELECT correlationId FROM {KERNEL} UNION SELECT correlationId FROM {MEMCPY})""",
        )
    )
    assert len(launches) == k.height
    for corr, launch in k.select("correlation", "launch").iter_rows():
        # CUPTI's version suffix (cudaLaunchKernel_v7000) is dropped, as Kineto does.
        assert launches[corr].startswith(launch + "_v") or launches[corr] == launch
    kernel_launches = k.filter(pl.col("kind") == "kernel")["launch"].unique().to_list()
    assert kernel_launches == ["cudaLaunchKernel"]
    # The launch time is the CUPTI runtime record's start.
    starts = dict(sql(path, f"SELECT correlationId, start FROM {RUNTIME} WHERE eventClass = 0"))
    assert all(starts[c] == ts for c, ts in k.select("correlation", "launch_ts").iter_rows())


@pytest.mark.parametrize("path", FIXTURES)
def test_runtime_rows_are_not_doubled(path: Path) -> None:
    t = load(path)
    distinct = one(path, f"SELECT count(DISTINCT correlationId) FROM {RUNTIME}")
    assert t.runtime.height == distinct
    assert t.runtime["correlation"].n_unique() == distinct
    classes = dict(sql(path, f"SELECT eventClass, count(*) FROM {RUNTIME} GROUP BY 1"))
    assert t.runtime.filter(pl.col("cat") == "cuda_driver").height == classes.get(1, 0)


def test_saxpy_runtime_has_backtrace_duplicates_to_drop() -> None:
    # The premise of the test above: this 2022 export repeats 38 calls as
    # "CUDA backtrace" rows (eventClass 67) with the same correlation id.
    assert one(SAXPY, f"SELECT count(*) FROM {RUNTIME} WHERE eventClass = 67") == 38
    assert one(SAXPY, f"SELECT count(*) FROM {RUNTIME}") == 95
    assert load(SAXPY).runtime.height == 57


@pytest.mark.parametrize("path", FIXTURES)
def test_gpu_properties_in_metadata(path: Path) -> None:
    t = load(path)
    device = t.kernels["device"].unique().to_list()
    assert len(device) == 1
    name, sms, memory = sql(
        path, f"SELECT name, smCount, totalMemory FROM TARGET_INFO_GPU WHERE cuDevice = {device[0]}"
    )[0]
    props = {d["id"]: d for d in t.devices}
    assert props[device[0]]["name"] == name
    assert props[device[0]]["numSms"] == sms
    assert props[device[0]]["totalGlobalMem"] == memory
    assert len(t.devices) == one(path, "SELECT count(*) FROM TARGET_INFO_GPU")
    assert name.startswith("NVIDIA A100")
    # Blocks per SM as Kineto derives it.
    first = t.kernels.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert first["blocks_per_sm"] == pytest.approx(first["grid_x"] * first["grid_y"] * first["grid_z"] / sms)


def test_saxpy_kernels_are_attributed_to_the_enclosing_nvtx_range() -> None:
    t = load(SAXPY)
    expected = innermost_nvtx_of_kernels(SAXPY)
    kernels = t.kernels.filter(pl.col("kind") == "kernel")
    assert dict(kernels.select("correlation", "op").iter_rows()) == expected
    assert Counter(expected.values()) == {"saxpy": 5}
    # Launches carry the link the model made by containment.
    launched = t.runtime.filter(pl.col("correlation").is_in(kernels["correlation"].implode()))
    assert launched["op_link"].unique().to_list() == ["containment"]


def test_saxpy_nvtx_ranges_are_ops_with_domains() -> None:
    t = load(SAXPY)
    ranges = sql(
        SAXPY,
        """SELECT COALESCE(n.text, s.value), d.text FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
           LEFT JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.domainId = n.domainId
           WHERE n.eventType IN (59, 60) AND n."end" IS NOT NULL""",
    )
    assert t.ops.height == len(ranges) == 22
    assert Counter(t.ops["name"].to_list()) == Counter(name for name, _ in ranges)
    cats = Counter(zip(t.ops["name"].to_list(), t.ops["cat"].cast(pl.String).to_list()))
    assert cats == Counter((name, f"nvtx:{d}" if d else "nvtx") for name, d in ranges)
    assert cats[("MPI_Send", "nvtx:MPI")] == 10
    # The ops report sums GPU time per NVTX range.
    proc = run_cli("ops", SAXPY, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    total_ns = one(SAXPY, f'SELECT sum("end" - start) FROM {KERNEL}')
    assert rows["saxpy"]["calls"] == 5
    assert rows["saxpy"]["device_total_us"] == pytest.approx(total_ns / 1000.0)


def test_cloverleaf_has_no_nvtx_and_no_ops() -> None:
    assert one(CLOVERLEAF, "SELECT count(*) FROM sqlite_master WHERE name = 'NVTX_EVENTS'") == 0
    t = load(CLOVERLEAF)
    assert t.ops.height == 0
    assert t.kernels["op"].null_count() == t.kernels.height
    assert t.warnings == []


def test_saxpy_threads_processes_and_rank() -> None:
    t = load(SAXPY)
    main_tid, main_name = sql(
        SAXPY,
        f"""SELECT t.globalTid & 16777215, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId
            WHERE t.globalTid = (SELECT globalTid FROM {RUNTIME} LIMIT 1)""",
    )[0]
    names = dict(zip(t.threads["tid"].to_list(), t.threads["name"].to_list()))
    assert names[main_tid] == main_name == "MPI Rank 0"
    assert set(t.runtime["tid"].to_list()) == {main_tid}
    pid, pname = sql(SAXPY, f"SELECT pid, name FROM PROCESSES WHERE globalPid = (SELECT globalPid FROM {KERNEL} LIMIT 1)")[0]
    assert t.processes.select("pid", "name").rows() == [(pid, pname)]
    assert t.rank == 0


def test_cache_round_trip(tmp_path: Path) -> None:
    path = copy(SAXPY, tmp_path)
    first = kinetolens.load(path, cache=tmp_path / "cache")
    assert len(list((tmp_path / "cache").iterdir())) == 1
    second = kinetolens.load(path, cache=tmp_path / "cache")
    assert second.format == first.format == "nsys-sqlite"
    assert second.metadata == first.metadata
    assert second.kernels.equals(first.kernels) and second.ops.equals(first.ops)


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("path", FIXTURES)
def test_cli_kernels_json(path: Path) -> None:
    proc = run_cli("kernels", path, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    n_kernels = one(path, f"SELECT count(*) FROM {KERNEL}")
    assert len(rows) == n_kernels + one(path, f"SELECT count(*) FROM {MEMCPY}")
    names = Counter(r["kernel"] for r in rows if not r["kernel"].startswith("Memcpy "))
    assert names == Counter(kernel_names_by_correlation(path).values())
    assert sum(r["dur_us"] for r in rows if not r["kernel"].startswith("Memcpy ")) == pytest.approx(
        one(path, f'SELECT sum("end" - start) FROM {KERNEL}') / 1000.0
    )


def test_cli_table_shows_brackets_in_kernel_names() -> None:
    # Terminal tables must print names verbatim: rich would read
    # "[lambda(int) (instance 1)]" as markup and drop it.
    proc = run_cli("kernels", CLOVERLEAF, "-c", "kernel", "-w", "300")
    assert proc.returncode == 0, proc.stderr
    assert "::[lambda(int) (instance 1)]>(clover::Range1d, T1)" in proc.stdout


def test_cli_summary_json() -> None:
    proc = run_cli("summary", CLOVERLEAF, "--json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["format"] == "nsys-sqlite"
    assert s["events"]["kernels"] == one(CLOVERLEAF, f"SELECT count(*) FROM {KERNEL}")
    assert s["events"]["memcpy"] == one(CLOVERLEAF, f"SELECT count(*) FROM {MEMCPY}")
    assert s["attribution"]["launch"] == 1.0
    assert s["devices_used"] == [0]
    assert {d["name"] for d in s["devices"]} == {one(CLOVERLEAF, "SELECT DISTINCT name FROM TARGET_INFO_GPU")}


# --------------------------------------------------------------------------- schema variants


def test_variant_pid_tid_columns_instead_of_global_ids(tmp_path: Path) -> None:
    """Exports that store process/thread ids as plain columns."""
    path = copy(SAXPY, tmp_path)
    split_tid = "(globalTid >> 24) & 16777215 AS pid, globalTid & 16777215 AS tid"
    rewrite(
        path,
        *rebuild(RUNTIME, f'SELECT start, "end", eventClass, correlationId, nameId, {split_tid} FROM {{t}}'),
        *rebuild("NVTX_EVENTS", f'SELECT start, "end", eventType, text, textId, domainId, {split_tid} FROM {{t}}'),
        *rebuild(KERNEL, 'SELECT start, "end", deviceId, streamId, correlationId, demangledName, gridX, gridY, gridZ, '
                 "blockX, blockY, blockZ, (globalPid >> 24) & 16777215 AS processId FROM {t}"),
    )
    assert "globalTid" not in {r[1] for r in sql(path, f"PRAGMA table_info({RUNTIME})")}
    t, ref = load(path), load(SAXPY)
    cols = ["kind", "name", "ts", "dur", "correlation", "launch", "launch_ts", "op", "grid_x"]
    assert t.kernels.select(cols).equals(ref.kernels.select(cols))
    assert t.runtime.select("pid", "tid").unique().rows() == ref.runtime.select("pid", "tid").unique().rows()


def test_variant_inline_text_and_no_text_id(tmp_path: Path) -> None:
    """NVTX text inline only (no textId column); kernel names stored as text."""
    path = copy(SAXPY, tmp_path)
    rewrite(
        path,
        *rebuild("NVTX_EVENTS", 'SELECT n.start, n."end", n.eventType, n.globalTid, n.domainId, '
                 "COALESCE(n.text, s.value) AS text FROM {t} n LEFT JOIN StringIds s ON s.id = n.textId"),
        *rebuild(KERNEL, 'SELECT k.start, k."end", k.deviceId, k.streamId, k.correlationId, k.globalPid, '
                 "s.value AS demangledName FROM {t} k JOIN StringIds s ON s.id = k.demangledName"),
    )
    assert "textId" not in {r[1] for r in sql(path, "PRAGMA table_info(NVTX_EVENTS)")}
    t, ref = load(path), load(SAXPY)
    assert t.kernels.select("name", "op", "ts").equals(ref.kernels.select("name", "op", "ts"))
    assert sorted(t.ops["name"].to_list()) == sorted(ref.ops["name"].to_list())


def test_variant_identical_runtime_rows_collapse(tmp_path: Path) -> None:
    path = copy(CLOVERLEAF, tmp_path)
    rewrite(path, f"INSERT INTO {RUNTIME} SELECT * FROM {RUNTIME} WHERE correlationId % 2 = 0")
    assert one(path, f"SELECT count(*) FROM {RUNTIME}") > one(CLOVERLEAF, f"SELECT count(*) FROM {RUNTIME}")
    t = load(path)
    assert t.runtime.height == one(CLOVERLEAF, f"SELECT count(*) FROM {RUNTIME}")
    assert t.kernels["launch_id"].null_count() == 0


def test_variant_start_end_ranges_and_unclosed_range(tmp_path: Path) -> None:
    path = copy(SAXPY, tmp_path)
    rewrite(
        path,
        "UPDATE NVTX_EVENTS SET eventType = 60 WHERE text = 'saxpy'",
        "UPDATE NVTX_EVENTS SET \"end\" = NULL WHERE eventType = 59 AND start = (SELECT max(start) FROM NVTX_EVENTS)",
    )
    t = load(path)
    assert Counter(t.kernels.filter(pl.col("kind") == "kernel")["op"].to_list()) == {"saxpy": 5}
    assert TraceWarning("NVTX ranges never closed", 1, "skipped: no end time") in t.warnings
    assert t.ops.height == 21


def test_variant_emit_nvtx_ranges_become_ops_with_sequence_numbers(tmp_path: Path) -> None:
    """torch.autograd.profiler.emit_nvtx names its ranges 'op, seq = N, op_id = M, sizes = ...'."""
    path = copy(SAXPY, tmp_path)
    rewrite(path, "UPDATE NVTX_EVENTS SET text = 'aten::mm, seq = 7, op_id = 31, sizes = [[2, 3], [3, 4]], "
                  "input_op_ids = [(30,0)]' WHERE text = 'saxpy'")
    t = load(path)
    mm = t.ops.filter(pl.col("name") == "aten::mm")
    assert mm.height == 5
    assert mm["sequence_number"].unique().to_list() == [7]
    assert mm["input_dims"].unique().to_list() == ["[[2, 3], [3, 4]]"]
    assert Counter(t.kernels.filter(pl.col("kind") == "kernel")["op"].to_list()) == {"aten::mm": 5}


def test_variant_several_processes_keep_their_correlation_ids_apart(tmp_path: Path) -> None:
    """Correlation ids count per process: a second process reusing them must not steal launches."""
    path = copy(SAXPY, tmp_path)
    shifted = 'SET start = start + 1, "end" = "end" + 1'
    rewrite(
        path,
        f"CREATE TEMP TABLE k2 AS SELECT * FROM {KERNEL}",
        f"UPDATE k2 {shifted}, globalPid = globalPid + (1 << 24)",
        f"INSERT INTO {KERNEL} SELECT * FROM k2",
        f"CREATE TEMP TABLE r2 AS SELECT * FROM {RUNTIME} WHERE eventClass = 0",
        f"UPDATE r2 {shifted}, globalTid = globalTid + (1 << 24)",
        f"INSERT INTO {RUNTIME} SELECT * FROM r2",
    )
    t = load(path)
    kernels = t.kernels.filter(pl.col("kind") == "kernel")
    assert kernels.height == 10
    # Each kernel's launch is the runtime call of its own process.
    expected = sql(
        path,
        f"""SELECT k.start, r.start FROM {KERNEL} k JOIN {RUNTIME} r ON r.correlationId = k.correlationId
            AND r.eventClass = 0 AND (r.globalTid >> 24) = (k.globalPid >> 24)""",
    )
    assert sorted(kernels.select("ts", "launch_ts").rows()) == sorted(expected)
    assert t.runtime["pid"].n_unique() == 2


# --------------------------------------------------------------------------- no GPU activity, bad input


def test_export_without_gpu_activity_loads_with_a_warning(tmp_path: Path) -> None:
    path = copy(SAXPY, tmp_path)
    rewrite(path, f"DROP TABLE {KERNEL}", f"DROP TABLE {MEMCPY}", "DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET")
    t = load(path)
    assert t.kernels.height == 0
    assert [w.kind for w in t.warnings] == ["no GPU activity"]
    assert t.ops.height == 22 and t.runtime.height == 57
    proc = run_cli("summary", path)
    assert proc.returncode == 0 and "no GPU activity" in proc.stdout, proc.stderr


def _wrong_tables(d: Path) -> Path:
    path = d / "other.sqlite"
    rewrite(path, "CREATE TABLE measurements (t INTEGER, v REAL)", "INSERT INTO measurements VALUES (1, 2.5)")
    return path


def _truncated(d: Path) -> Path:
    path = d / "cut.sqlite"
    path.write_bytes(CLOVERLEAF.read_bytes()[: CLOVERLEAF.stat().st_size // 2])
    return path


def _random_pages(d: Path) -> Path:
    path = d / "noise.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + random.Random(7).randbytes(8192))
    return path


def _text_in_time_column(d: Path) -> Path:
    return rewrite(copy(SAXPY, d, "edited.sqlite"), f"UPDATE {KERNEL} SET start = 'soon' WHERE rowid = 2")


def _kernel_table_without_times(d: Path) -> Path:
    return rewrite(copy(SAXPY, d, "notimes.sqlite"), *rebuild(KERNEL, "SELECT correlationId, demangledName FROM {t}"))


BAD = {
    "wrong-tables": (_wrong_tables, ("not an Nsight Systems export", "measurements")),
    "truncated": (_truncated, ("truncated SQLite file", "{size}")),
    "random-pages": (_random_pages, ("SQLite",)),
    "text-in-time-column": (_text_in_time_column, ("unexpected value", "'soon'")),
    "kernel-table-without-times": (_kernel_table_without_times, (KERNEL, "start")),
}


@pytest.fixture(scope="module")
def rejected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    """All bad files through the real CLI at once (process start-up dominates)."""
    paths = {name: make(tmp_path_factory.mktemp(name)) for name, (make, _) in BAD.items()}
    with ThreadPoolExecutor(max_workers=len(paths)) as pool:
        procs = dict(zip(paths, pool.map(lambda p: run_cli("kernels", p), paths.values())))
    return {name: (paths[name], procs[name]) for name in paths}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_exits_2_with_one_line(name: str, rejected: dict) -> None:
    path, proc = rejected[name]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(path.name) in lines[0]
    for word in BAD[name][1]:
        assert word.format(size=path.stat().st_size) in lines[0], lines[0]
    with pytest.raises(TraceError) as err:
        load(path)
    assert "\n" not in str(err.value)
