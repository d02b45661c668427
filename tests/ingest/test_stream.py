"""The streaming Kineto reader must agree exactly with the whole-file reader.

The streaming reader guesses event boundaries and validates each guess by
decoding; these tests check that it yields byte-for-byte the same tables as
the whole-file reader on every real trace, also when pieces are tiny (many
cuts, including cuts next to braces inside strings), and that it steps aside
rather than guess on damaged input.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kinetolens.ingest import kineto_stream
from kinetolens.ingest.kineto import TABLES, RawTables
from kinetolens.ingest.kineto_file import read_kineto
from kinetolens.ingest.kineto_stream import stream_kineto
from kinetolens.ingest.opener import StreamUnsupported, open_trace_bytes
from tests.conftest import TRACES

#: rocprofv3 JSON, a negative input: rejected before any reader runs (test_bad_input.py).
NOT_KINETO = {"908_results.json.gz"}
JSON_TRACES = sorted(p for p in TRACES.rglob("*") if p.is_file() and ".json" in p.name and p.name not in NOT_KINETO)
BERT = TRACES / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"


def _same(a: RawTables, b: RawTables) -> None:
    assert a.format == b.format
    assert a.metadata == b.metadata
    for name in TABLES:
        assert_frame_equal(getattr(a, name), getattr(b, name), categorical_as_str=True)


def _whole(path: Path) -> RawTables:
    return read_kineto(open_trace_bytes(path))


@pytest.mark.parametrize("path", JSON_TRACES, ids=lambda p: str(p.relative_to(TRACES)))
def test_stream_equals_whole_file_reader(path: Path) -> None:
    try:
        streamed = stream_kineto(path)
    except StreamUnsupported:
        # Only files the streaming reader cannot take: the legacy bare array
        # and files that are not Kineto traces at all (an execution trace,
        # TraceLens' graph-capture metadata).
        assert path.name in (
            "worker0.pt.trace.json.gz",
            "benchmark_simple_add_et.json.gz",
            "execution_details.json",
        ), path
        return
    _same(streamed, _whole(path))


def test_tiny_pieces_cut_between_every_few_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_stream, "PIECE_BYTES", 2048)
    _same(stream_kineto(BERT), _whole(BERT))


def test_braces_inside_strings_are_not_event_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A kernel name holding the boundary pattern, many times, right where a
    # piece would be cut: a reader that trusted the pattern would split the
    # string and either fail or invent events.
    text = gzip.decompress(BERT.read_bytes())
    trap = b'void k<{lambda}, {x}>}, {\\"ph\\": \\"X\\"}' * 40
    text = text.replace(b'"name": "void ', b'"name": "' + trap + b"void ", 20)
    path = tmp_path / "braces.json"
    path.write_bytes(text)
    monkeypatch.setattr(kineto_stream, "PIECE_BYTES", 4096)
    streamed = stream_kineto(path)
    _same(streamed, _whole(path))
    assert streamed.device.filter(pl.col("name").str.contains("lambda}, {x}", literal=True)).height == 20


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_damaged_files_are_left_to_the_whole_file_reader(tmp_path: Path, cut: float) -> None:
    blob = BERT.read_bytes()
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes(blob[: int(len(blob) * cut)])
    with pytest.raises(StreamUnsupported):
        stream_kineto(gz)
    text = gzip.decompress(blob)
    plain = tmp_path / "cut.json"
    plain.write_bytes(text[: int(len(text) * cut)])
    with pytest.raises(StreamUnsupported):
        stream_kineto(plain)


def test_exact_time_detected_late_in_a_chunk_keeps_each_event_once(tmp_path: Path) -> None:
    # Host times are integers (no sign of epoch floats); a device event in
    # the same chunk has an epoch-scale float time, which forces the chunk to
    # be decoded again keeping the text.  Every event must land once.
    events = [
        b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1712195495519689, "dur": 5}',
        b'{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1712195495519690.047, "dur": 2.5,'
        b' "args": {"correlation": 3, "stream": 7, "device": 0}}',
    ]
    path = tmp_path / "late_exact.json"
    path.write_bytes(b'{"traceEvents": [' + b",\n".join(events) + b"]}")
    for tables in (stream_kineto(path), _whole(path)):
        assert tables.host["ts"].to_list() == [1712195495519689000]
        assert tables.device["ts"].to_list() == [1712195495519690047]


def test_malformed_event_in_a_re_decoded_chunk_is_counted_once(tmp_path: Path) -> None:
    events = [
        b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1712195495519689.047, "dur": 5}',
        b'{"ph": "X", "cat": "cpu_op", "name": "bad", "pid": 1, "tid": 1, "ts": 1712195495519690.5, "dur": "x"}',
    ]
    path = tmp_path / "bad_exact.json"
    path.write_bytes(b'{"traceEvents": [' + b",\n".join(events) + b"]}")
    with pytest.raises(StreamUnsupported):
        stream_kineto(path)
    tables = _whole(path)
    assert tables.host["ts"].to_list() == [1712195495519689047]
    assert [(w.kind, w.count) for w in tables.warnings] == [("malformed events skipped", 1)]
