"""The multi-process decoder gives exactly the serial reader's tables, or steps aside.

Real worker processes decode real traces here; small pieces make one file
span many workers' pieces, so cuts, ordering and the end of the array are
all exercised on files CI can afford.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import kinetolens.ingest.kineto_parallel as kp
from kinetolens.errors import TraceError
from kinetolens.ingest import read_raw
from kinetolens.ingest.kineto_stream import stream_kineto
from kinetolens.ingest.opener import StreamUnsupported
from tests.conftest import trace_path

TABLES = ["host", "device", "memory", "flows", "threads", "processes", "counters"]


def assert_same(a: object, b: object) -> None:
    for name in TABLES:
        left, right = getattr(a, name), getattr(b, name)
        assert isinstance(left, pl.DataFrame)
        assert_frame_equal(left, right, check_exact=True)
    assert a.metadata == b.metadata  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("trace", "piece"),
    [
        # 216k events in ~14 pieces; deviceProperties follows the array.
        ("hta/df_index_resolver/df_index_resolver.json.gz", 4 << 20),
        # Epoch-scale float timestamps: each worker switches to exact times itself.
        ("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", 256 << 10),
    ],
)
def test_parallel_equals_serial(trace: str, piece: int) -> None:
    path = trace_path(trace)
    serial = stream_kineto(path)
    parallel = kp.parallel_kineto(path, workers=2, piece_bytes=piece)
    assert parallel.host.height == serial.host.height > 1000
    assert_same(serial, parallel)


def _tricky_trace(path: Path, events: int = 3000, long_name_at: int | None = None) -> Path:
    """Event boundaries inside strings and ``}]`` / ``},{`` after the array.

    The in-name ``"}, {"ph"`` is escaped in the file (``\\"``), so no cut may
    land there.  ``long_name_at``: give that event a name *ending* in ``}, {``
    (the one string a cut can be fooled by: its closing quote follows the
    brace) and 60 kB of call stack after it, so that a piece ends inside
    that event and its last candidate cut is the one in the name.
    """
    evs = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    for i in range(events):
        evs.append(
            {
                "ph": "X", "cat": "cpu_op", "name": 'aten::weird"}, {"ph": "X"' + "}" * (i % 3),
                "pid": 1, "tid": 1, "ts": 1000 + 10 * i, "dur": 5,
                "args": {"External id": i, "Input Dims": [[i % 7, 3]], "Input type": ["float"]},
            }
        )  # fmt: skip
    if long_name_at is not None:
        evs[long_name_at]["name"] = "aten::long}, {"
        evs[long_name_at]["args"]["Call stack"] = "x" * 60_000
    devices = [{"id": 0, "name": "NVIDIA H100"}, {"id": 1, "name": "NVIDIA H100"}]
    body = ",\n".join(json.dumps(e) for e in evs)
    path.write_text(f'{{"schemaVersion": 1, "traceEvents": [\n{body}\n], "deviceProperties": {json.dumps(devices)}}}')
    return path


def test_cuts_inside_strings_and_text_after_the_array(tmp_path: Path) -> None:
    """Either the workers' pieces all decode (and match) or the reader steps aside; never a wrong table."""
    path = _tricky_trace(tmp_path / "tricky.json")
    serial = stream_kineto(path)
    assert serial.host.height == 3000
    assert serial.metadata["deviceProperties"][1]["name"] == "NVIDIA H100"
    decoded = 0
    for piece in (4 << 10, 16 << 10, 64 << 10):
        try:
            parallel = kp.parallel_kineto(path, workers=2, piece_bytes=piece)
        except StreamUnsupported:
            continue
        assert_same(serial, parallel)
        decoded += 1
    # The last event boundary of each piece is a real one here, so the
    # workers' path (not only the fallback) must have run and matched.
    assert decoded > 0


def test_read_raw_uses_the_pool_and_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kp, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(kp, "PIECE_BYTES", 8 << 10)
    monkeypatch.setenv(kp.WORKERS_ENV, "2")
    path = _tricky_trace(tmp_path / "tricky.json")
    assert kp.wants_parallel(path) == 2
    assert_same(stream_kineto(path), read_raw(path))

    # A cut inside a string: the workers cannot decode it, the pool steps
    # aside and the serial reader's tables come back all the same.
    long = _tricky_trace(tmp_path / "long.json", long_name_at=1500)
    with pytest.raises(StreamUnsupported):
        kp.parallel_kineto(long, workers=2, piece_bytes=8 << 10)
    pooled = read_raw(long)
    assert (pooled.host["name"] == "aten::long}, {").sum() == 1
    monkeypatch.setenv(kp.WORKERS_ENV, "0")
    assert_same(read_raw(long), pooled)


def test_damaged_files_get_the_serial_readers_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A truncated gzip loads what is intact with a warning, as without the pool."""
    src = trace_path("hta/trace_filter/sampled_rank-0.json.gz")
    data = gzip.decompress(src.read_bytes())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(data)[: len(gzip.compress(data)) * 2 // 3])
    serial = read_raw(cut)
    monkeypatch.setattr(kp, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setenv(kp.WORKERS_ENV, "2")
    pooled = read_raw(cut)
    assert serial.warnings and [str(w) for w in pooled.warnings] == [str(w) for w in serial.warnings]
    assert_same(serial, pooled)

    negative = tmp_path / "negative.json"
    negative.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "cat": "cpu_op", "pid": 1,
                                                      "tid": 1, "ts": 5, "dur": -3}]}))  # fmt: skip
    with pytest.raises(TraceError, match="negative duration"):
        read_raw(negative)


def test_worker_count_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kp.WORKERS_ENV, "0")
    assert kp.decode_workers() == 0
    monkeypatch.setenv(kp.WORKERS_ENV, "3")
    assert kp.decode_workers() == 3
    monkeypatch.setenv(kp.WORKERS_ENV, "many")
    with pytest.raises(TraceError, match="KINETOLENS_DECODE_WORKERS.*whole number"):
        kp.decode_workers()
    monkeypatch.delenv(kp.WORKERS_ENV)
    cores = kp.usable_cores()
    assert kp.decode_workers() == (min(cores - 1, kp.MAX_AUTO_WORKERS) if cores >= kp.MIN_AUTO_CORES else 0)
