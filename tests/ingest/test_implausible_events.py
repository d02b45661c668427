"""Events whose timing or shape cannot be used are dropped and counted, never used.

A kernel with a null or missing ``ts`` used to load with a null start (GPU
utilization 1.0002), a negative ``ts`` stretched the trace over a century,
an Nsight end of 2**63-1 made a step of 292 years, impossible device
properties were passed on, and events without a phase or category vanished
without a word.  Each is now a counted load warning (or, when nothing
usable is left, one line naming the file and exit status 2).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

import kinetolens
from tests.ingest.test_bad_input import (
    BERT,
    TRACES,
    bert_json,
    check_cli_rejection,
    edit_kernel,
    nth_kernel,
    run_cli,
    write,
)

NSYS = TRACES / "nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"


@pytest.fixture(scope="module")
def reference() -> kinetolens.Trace:
    return kinetolens.load(BERT, cache=False)


def warned(trace: kinetolens.Trace, words: str) -> int:
    """How many events the warnings whose text holds ``words`` count."""
    return sum(w.count for w in trace.warnings if words in f"{w.kind} {w.detail}")


def _drop_first_kernel_field(field: str) -> bytes:
    text = bert_json()
    m = re.compile(rb'\s*"%s": [^,]+,' % field.encode()).search(text, nth_kernel(text))
    assert m is not None
    return text[: m.start()] + text[m.end() :]


@pytest.mark.parametrize(
    "make",
    [lambda: edit_kernel(bert_json(), "ts", b"null"), lambda: _drop_first_kernel_field("ts")],
    ids=["null", "missing"],
)
def test_kernel_without_ts_is_skipped_and_counted(tmp_path: Path, make, reference: kinetolens.Trace) -> None:  # type: ignore[no-untyped-def]
    trace = kinetolens.load(write(tmp_path, "nots.json", make()), cache=False)
    assert warned(trace, "without a timestamp") == 1
    assert trace.kernels.height == reference.kernels.height - 1
    assert trace.kernels["ts"].null_count() == 0


@pytest.mark.parametrize("ts", [b"-1000000000000", b"0", b"1e15"])
def test_kernel_far_from_the_trace_is_skipped_and_counted(tmp_path: Path, ts: bytes, reference: kinetolens.Trace) -> None:
    trace = kinetolens.load(write(tmp_path, "far.json", edit_kernel(bert_json(), "ts", ts)), cache=False)
    assert warned(trace, "more than a day from the rest") == 1
    assert trace.kernels.height == reference.kernels.height - 1
    span = trace.kernels["ts"].max() - trace.kernels["ts"].min()  # type: ignore[operator]
    assert span < 60 * 10**9


def test_far_off_kernel_leaves_the_summary_span_unchanged(tmp_path: Path) -> None:
    path = write(tmp_path, "neg.json", edit_kernel(bert_json(), "ts", b"-1000000000000"))
    proc = run_cli(path, "summary", "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    want = json.loads(run_cli(BERT, "summary", "--json").stdout)
    assert got["span_us"] == want["span_us"]
    assert any("more than a day" in w["detail"] and w["count"] == 1 for w in got["warnings"])


def test_kernel_lasting_more_than_a_day_is_skipped(tmp_path: Path, reference: kinetolens.Trace) -> None:
    trace = kinetolens.load(write(tmp_path, "long.json", edit_kernel(bert_json(), "dur", b"100000000000")), cache=False)
    assert warned(trace, "lasting more than a day") == 1
    assert trace.kernels.height == reference.kernels.height - 1


def test_event_without_category_is_counted(tmp_path: Path, reference: kinetolens.Trace) -> None:
    text = bert_json()
    at = nth_kernel(text)
    path = write(tmp_path, "nocat.json", text[:at] + b'"cat": null' + text[at + len(b'"cat": "kernel"') :])
    trace = kinetolens.load(path, cache=False)
    assert warned(trace, "without a category") == 1
    assert trace.kernels.height == reference.kernels.height - 1


@pytest.mark.parametrize("phase", [None, "B"], ids=["no-ph", "unread-ph"])
def test_event_without_a_read_phase_is_counted(tmp_path: Path, phase: str | None, reference: kinetolens.Trace) -> None:
    text = bert_json()
    m = re.compile(rb'"ph": "X",(\s*"cat": "kernel")').search(text)
    assert m is not None
    new = m.group(1) if phase is None else b'"ph": "%s",' % phase.encode() + m.group(1)
    trace = kinetolens.load(write(tmp_path, "noph.json", text[: m.start()] + new + text[m.end() :]), cache=False)
    assert warned(trace, "phase") == 1
    assert trace.kernels.height == reference.kernels.height - 1


@pytest.mark.parametrize("command", ["summary", "report"])
def test_trace_with_no_usable_event_is_one_line(tmp_path: Path, command: str) -> None:
    path = write(tmp_path, "empty_event.json", b'{"traceEvents": [{}]}')
    extra = ("-o", str(tmp_path / "r.html")) if command == "report" else ()
    problem = check_cli_rejection(run_cli(path, command, *extra), path)
    assert "no usable events" in problem and "phase" in problem, problem


def test_impossible_kineto_device_properties_are_dropped(tmp_path: Path) -> None:
    doc = json.loads(bert_json())
    doc["deviceProperties"][0].update(totalGlobalMem=-1, numSms=-4, warpSize="32")
    trace = kinetolens.load(write(tmp_path, "props.json", json.dumps(doc).encode()), cache=False)
    assert warned(trace, "impossible values") == 3
    device = trace.devices[0]
    assert "totalGlobalMem" not in device and "numSms" not in device and "warpSize" not in device
    assert device["maxThreadsPerBlock"] == 1024


def test_nsys_end_of_int64_max_and_impossible_gpu_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "bad.sqlite"
    shutil.copyfile(NSYS, path)
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = 9223372036854775807 "
            "WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)"
        )
        db.execute("UPDATE TARGET_INFO_GPU SET smCount = -4, totalMemory = -1")
    reference = kinetolens.load(NSYS, cache=False)
    trace = kinetolens.load(path, cache=False)
    assert warned(trace, "more than a day") == 1
    assert trace.kernels.height == reference.kernels.height - 1
    assert warned(trace, "impossible values") == 2 * len(trace.devices)
    assert all("numSms" not in d and "totalGlobalMem" not in d for d in trace.devices)
    proc = run_cli(path, "summary", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["span_us"] < 3600 * 1e6


@pytest.mark.parametrize(
    ("info", "dropped"),
    [({"rank": 2**63, "world_size": 8}, 1), ({"rank": 3, "world_size": -1}, 1), ({"rank": "0", "world_size": 0}, 2)],
)
def test_impossible_distributed_info_is_dropped(tmp_path: Path, info: dict[str, object], dropped: int) -> None:
    doc = json.loads(bert_json())
    doc["distributedInfo"] = {"backend": "nccl", **info}
    path = write(tmp_path, "dist.json", json.dumps(doc).encode())
    trace = kinetolens.load(path, cache=False)
    assert warned(trace, "impossible values") == dropped
    assert trace.rank is None or 0 <= trace.rank < 2**24
    assert trace.world_size is None or 1 <= trace.world_size < 2**24
    proc = run_cli(path, "summary", "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
