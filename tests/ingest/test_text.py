"""Text that is not valid Unicode loads, replaced with U+FFFD and counted.

one string with bytes that are not UTF-8 (a kernel name,
an op's dtype, metadata another tool wrote into an nsys export) used to
reject the whole file, or crash.  Every other number must come out exactly
as from the clean file.  Each damaged file is a copy of a real trace from
``../shared`` with invalid bytes injected.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from functools import cache
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.ingest.kineto_counters import read_profiler_counters

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TRACES = SHARED / "traces"
BERT = TRACES / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
CUPTI = TRACES / "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz"
SAXPY = TRACES / "nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"

pytestmark = pytest.mark.skipif(
    not all(p.exists() for p in (BERT, CUPTI, SAXPY)), reason=f"real traces not found under {TRACES}"
)


@cache
def bert_json() -> bytes:
    return gzip.decompress(BERT.read_bytes())


@cache
def clean() -> kinetolens.Trace:
    return kinetolens.load(BERT, cache=False)


def fourth_kernel_name_at(text: bytes) -> int:
    pos = -1
    for _ in range(4):
        pos = text.index(b'"cat": "kernel"', pos + 1)
    return text.index(b'"name": "', pos) + len(b'"name": "')


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", POLARS_MAX_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, timeout=120, env=env
    )


def replaced(trace: kinetolens.Trace) -> kinetolens.TraceWarning:
    found = [w for w in trace.warnings if w.kind == "invalid text replaced"]
    assert len(found) == 1, trace.warnings
    return found[0]


def assert_same_numbers(trace: kinetolens.Trace, reference: kinetolens.Trace) -> None:
    """Every row survived and every number is the clean file's."""
    for table in ("events", "kernels", "ops"):
        got, want = getattr(trace, table), getattr(reference, table)
        assert got.height == want.height, table
        numbers = [c for c, t in want.schema.items() if t.is_numeric()]
        assert got.select(numbers).equals(want.select(numbers)), table


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_invalid_utf8_in_a_kernel_name_is_replaced_and_counted(tmp_path: Path, suffix: str) -> None:
    text = bert_json()
    at = fourth_kernel_name_at(text)
    name = text[at : text.index(b'"', at)].decode()
    damaged = text[:at] + b"\xff\xfe\xc3" + text[at + 3 :]
    path = tmp_path / f"trace{suffix}"
    path.write_bytes(gzip.compress(damaged) if suffix.endswith(".gz") else damaged)

    trace = kinetolens.load(path, cache=False)
    assert_same_numbers(trace, clean())
    warning = replaced(trace)
    # \xff, \xfe and the \xc3 that lost its continuation byte: one run.
    assert warning.count == 1 and f"byte {at}" in warning.detail, warning
    names = trace.kernels["name"].to_list()
    assert names.count("\ufffd" + name[3:]) == 1
    assert names.count(name) == clean().kernels["name"].to_list().count(name) - 1

    proc = run_cli("summary", "--no-cache", str(path))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "invalid text replaced" in proc.stdout


def test_invalid_utf8_in_metadata_and_in_op_dtypes(tmp_path: Path) -> None:
    """Metadata (device name) and a raw-JSON column (an op's input types): on
    the original code the first was refused, the second a UnicodeDecodeError traceback."""
    text = bert_json()
    gpu = text.index(b'"NVIDIA H100') + 2
    dtype = re.compile(rb'"Input type": \[\s*"').search(text)
    assert dtype is not None
    cut = dtype.end()
    damaged = text[:gpu] + b"\xff" + text[gpu + 1 : cut] + b"\xe9" + text[cut:]
    path = tmp_path / "trace.json"
    path.write_bytes(damaged)

    trace = kinetolens.load(path, cache=False)
    assert_same_numbers(trace, clean())
    assert replaced(trace).count == 2
    assert any(str(v).startswith("\ufffd") for v in trace.ops["input_types"].drop_nulls().str.json_decode().explode())
    proc = run_cli("ops", "--no-cache", "-t", "3", "--csv", str(path))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_lone_surrogate_escape_keeps_the_event(tmp_path: Path) -> None:
    """``\\udc80`` is what Python's json.dump writes for a byte that is not
    UTF-8; msgspec refuses it, and the event used to be skipped as malformed
    (one kernel fewer, a different total)."""
    text = bert_json()
    at = fourth_kernel_name_at(text)
    path = tmp_path / "trace.json"
    path.write_bytes(text[:at] + rb"\udc80" + text[at:])
    trace = kinetolens.load(path, cache=False)
    assert_same_numbers(trace, clean())
    assert replaced(trace).count == 1
    assert any(n.startswith("\ufffd") for n in trace.kernels["name"])


def test_counter_rescan_reads_a_file_with_invalid_utf8(tmp_path: Path) -> None:
    """The second pass that reads CUPTI counter ranges replaces text the same way."""
    text = gzip.decompress(CUPTI.read_bytes())
    at = text.index(b'"name": "', text.index(b'"cat": "cuda_profiler_range"')) + len(b'"name": "')
    path = tmp_path / "cupti.json"
    path.write_bytes(text[:at] + b"\xff" + text[at + 1 :])
    want, _ = read_profiler_counters(CUPTI)
    got, warnings = read_profiler_counters(path)
    assert want.height > 0 and not warnings, warnings
    numbers = [c for c, t in want.schema.items() if t.is_numeric()]
    assert got.select(numbers).equals(want.select(numbers))
    assert replaced(kinetolens.load(path, cache=False)).count == 1


def test_invalid_bytes_outside_strings_are_still_invalid_json(tmp_path: Path) -> None:
    text = bert_json()
    at = text.index(b"[", text.index(b'"traceEvents"')) + 1
    path = tmp_path / "trace.json"
    path.write_bytes(text[:at] + b"\xff" + text[at:])
    proc = run_cli("summary", "--no-cache", str(path))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "invalid JSON" in proc.stderr and f"byte {at}" in proc.stderr, proc.stderr


def nsys_copy(tmp_path: Path, *statements: str) -> Path:
    path = tmp_path / SAXPY.name
    shutil.copyfile(SAXPY, path)
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return path


def test_nsys_text_columns_that_are_not_utf8(tmp_path: Path) -> None:
    """Metadata another tool wrote, and the kernel name in StringIds: the
    original code refused the file ("Could not decode to UTF-8 column 'value'")."""
    path = nsys_copy(
        tmp_path,
        "UPDATE EXPORT_META_DATA SET value = CAST(X'4e5653ff20fe' AS TEXT) WHERE name = 'EXPORT_PRODUCT_NAME'",
        "UPDATE StringIds SET value = CAST(X'73617870ff79' AS TEXT) || substr(value, 6) WHERE value LIKE 'saxpy(double *%'",
    )
    reference = kinetolens.load(SAXPY, cache=False)
    trace = kinetolens.load(path, cache=False)
    assert_same_numbers(trace, reference)
    warning = replaced(trace)
    # Counted per value read: two runs in the metadata value, one in each
    # kernel row that carries the name.
    saxpy = reference.kernels.filter(pl.col("name").str.starts_with("saxpy(")).height
    assert saxpy > 0 and warning.count == 2 + saxpy, warning
    assert "EXPORT_META_DATA" in warning.detail and "GPU activity" in warning.detail, warning
    kernels = set(reference.kernels["name"])
    assert set(trace.kernels["name"]) == {n.replace("saxpy(", "saxp\ufffdy(") for n in kernels} != kernels
    assert trace.kernels["dur"].sum() == reference.kernels["dur"].sum()

    proc = run_cli("kernels", "--no-cache", "--json", str(path))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == reference.kernels.height and any(r["kernel"].startswith("saxp\ufffdy(") for r in rows), rows[:2]


def test_clean_files_have_no_text_warning() -> None:
    assert not [w for w in clean().warnings if w.kind == "invalid text replaced"]
    assert isinstance(clean().kernels, pl.DataFrame)


def test_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    """A Latin-1 file name reaches Python as lone surrogates, which the cache
    key, the cache's metadata and every JSON writer refused with a traceback."""
    path = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9.json.gz"))
    shutil.copyfile(BERT, path)
    shown = str(tmp_path) + "/caf\ufffd.json.gz"
    for _ in range(2):  # the second run reads what the first cached
        proc = run_cli("summary", "--json", str(path))
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert json.loads(proc.stdout)["events"] == json.loads(run_cli("summary", "--json", "--no-cache", str(BERT)).stdout)["events"]
    proc = run_cli("report", "--format", "md", str(path))
    assert proc.returncode == 0 and shown in proc.stdout, proc.stderr
    assert kinetolens.load(path).path == shown


def test_run_metadata_with_a_lone_surrogate_escape(tmp_path: Path) -> None:
    """``kinetolens run -- python café.py`` (a Latin-1 name) records the command
    as json.dump writes it, ``"caf\\udce9.py"``: the whole file was dropped."""
    from kinetolens.formats import RUN_METADATA_KEY, metadata_name

    trace = tmp_path / "worker0.pt.trace.json.gz"
    shutil.copyfile(BERT, trace)
    meta = {"schema": "kinetolens.capture/1", "torch_version": "2.13.0", "launch_command": ["python", "caf\udce9.py"]}
    (tmp_path / metadata_name(trace.name)).write_text(json.dumps(meta))
    run = kinetolens.load(trace, cache=False).metadata[RUN_METADATA_KEY]
    assert run["launch_command"] == ["python", "caf\ufffd.py"] and run["torch_version"] == "2.13.0"


@pytest.mark.parametrize(
    ("text", "decoded", "count"),
    [
        (rb'"\ud83d\ude00"', "\U0001f600", 0),  # a well-formed pair is text, kept
        (rb'"\\udc80"', "\\udc80", 0),  # an escaped backslash, then letters
        (rb'"\udc80"', "\ufffd", 1),
        (rb'"\ud800\ud800"', "\ufffd\ufffd", 2),
        (rb'"\ude00\ud83d"', "\ufffd\ufffd", 2),  # halves in the wrong order
        (rb'"\ud83d\ude00\ude00"', "\U0001f600\ufffd", 1),
        (b'"caf\xe9 \xff\xfe"', "caf\ufffd \ufffd", 2),
    ],
)
def test_repair_replaces_only_what_is_not_text(text: bytes, decoded: str, count: int) -> None:
    from kinetolens.ingest.text_repair import repair_json_text

    repaired = repair_json_text(text)
    assert json.loads(repaired.data) == decoded and repaired.count == count
