"""An args field no event of a chunk has is a null column, made without reading each event.

The host table reads up to 24 args fields per op, most of them absent from
most traces (collectives, Python ids, ...).  A field whose JSON key does not
occur in a chunk's args text is null on every event there, so its column is
made without a pass over the events; a key spelled with ``\\u`` escapes
(valid JSON, decoded to the same name) must still be read.
"""

from __future__ import annotations

import json
from pathlib import Path

from kinetolens.ingest import read_raw
from kinetolens.ingest.kineto_columns import fields_in


def _trace(path: Path, args_text: str) -> Path:
    op = '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": %s}' % args_text
    other = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20, "dur": 5, "args": {"External id": 2}}
    path.write_text('{"traceEvents": [%s, %s]}' % (op, json.dumps(other)))
    return path


def test_only_the_keys_in_the_text_are_read() -> None:
    text = b'[{"External id": 1, "Sequence number": 4}, {}]'
    assert fields_in(text, "host") == {"external_id", "sequence_number"}
    assert fields_in(b'[{"Python id": 1}]', "python") == {"python_id"}


def test_an_escaped_key_is_read(tmp_path: Path) -> None:
    raw = read_raw(_trace(tmp_path / "t.json", '{"External id": 1, "Sequence\\u0020number": 42}'))
    host = raw.host.sort("ts")
    assert host["sequence_number"].to_list() == [42, None]
    assert host["fwd_thread_id"].to_list() == [None, None]


def test_absent_fields_are_typed_null_columns(tmp_path: Path) -> None:
    raw = read_raw(_trace(tmp_path / "t.json", '{"External id": 1, "Sequence number": 42}'))
    host = raw.host.sort("ts")
    assert host["sequence_number"].to_list() == [42, None]
    assert host["external_id"].to_list() == [1, 2]
    for column in ("fwd_thread_id", "python_id", "group_size", "comm_seq"):
        assert host[column].dtype.is_integer() and host[column].null_count() == 2, column
    assert host["collective_name"].null_count() == 2
