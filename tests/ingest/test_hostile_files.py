"""Files that are not traces in ways a parser does not expect.

Deep nesting, paths that cannot be stat'ed or read (a symlink loop, a
directory we may not enter, a named pipe, a /proc pseudo-file), a byte
order mark, a lone surrogate escape, a gzip bomb.  Each either loads or
ends in one line naming the file with exit status 2: never a traceback,
never a hang, never an unbounded allocation.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import time
import traceback
from contextlib import redirect_stderr
from pathlib import Path

import pytest

import kinetolens
from kinetolens import TraceError
from tests.ingest.test_bad_input import (
    BERT,
    bert_json,
    check_cli_rejection,
    load_rejection,
    nth_kernel,
    run_cli,
    write,
)

DEEP = b"[" * 100_000 + b"]" * 100_000


def _deep_file() -> bytes:
    return b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7}], "x": ' + DEEP + b"}"


def _deep_args() -> bytes:
    text = bert_json()
    at = text.index(b'"args": {', nth_kernel(text)) + len(b'"args": {')
    return text[:at] + b'"deep": ' + DEEP + b", " + text[at:]


def _deep_metadata() -> bytes:
    text = bert_json().lstrip()
    return b'{"meta": ' + DEEP + b", " + text[1:]


def _deep_event() -> bytes:
    text = bert_json()
    at = text.index(b"[", text.index(b'"traceEvents"')) + 1
    return text[:at] + b"{" + b'"a": {' * 50_000 + b"}" * 50_001 + b", " + text[at:]


@pytest.mark.parametrize(
    "make", [_deep_file, _deep_args, _deep_metadata, _deep_event, lambda: DEEP], ids=["file", "args", "metadata", "event", "whole"]
)
def test_deep_nesting_is_one_line(tmp_path: Path, make) -> None:  # type: ignore[no-untyped-def]
    path = write(tmp_path, "deep.json", make())
    assert "nested too deeply" in check_cli_rejection(run_cli(path), path)


def test_deep_nesting_in_gzip_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "deep.json.gz", gzip.compress(_deep_args(), mtime=0))
    assert "nested too deeply" in load_rejection(path)


def test_symlink_loop_says_so(tmp_path: Path) -> None:
    path = tmp_path / "loop.json"
    path.symlink_to(path)
    assert "symlink loop" in check_cli_rejection(run_cli(path), path)


def test_proc_pseudo_file_is_not_a_trace() -> None:
    path = Path("/proc/self/status")
    problem = check_cli_rejection(run_cli(path), path)
    assert "special file" in problem and "empty" not in problem, problem


def test_named_pipe_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "summary", "--no-cache", str(path)],
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert "named pipe" in check_cli_rejection(proc, path)
    assert time.monotonic() - start < 60
    with pytest.raises(TraceError, match="named pipe"):
        kinetolens.load(path, cache=False)


def test_unreadable_directory_is_one_line(tmp_path: Path) -> None:
    """Run the CLI as an unprivileged user (fork + setuid) on a trace inside
    a directory only root may enter: the OS raises a real PermissionError."""
    import importlib

    from kinetolens.cli.main import COMMANDS, main

    # the unprivileged child cannot read root's site-packages: import what the command needs first
    importlib.import_module(COMMANDS["summary"].module)
    # ... and what the command imports only when it runs (the loader, the analyses)
    for module in ("kinetolens.loader", "kinetolens.analysis.summary", "kinetolens.cli.summary_output"):
        importlib.import_module(module)
    import rich.console  # noqa: F401
    import rich.table  # noqa: F401

    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another user")  # never under the project's runner: it is root
    locked = tmp_path / "locked"
    locked.mkdir()
    path = write(locked, "trace.json.gz", BERT.read_bytes())
    locked.chmod(0o700)
    tmp_path.chmod(0o755)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 3
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            err = io.StringIO()
            try:
                with redirect_stderr(err):
                    main(["summary", "--no-cache", str(path)])
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                err.write(f"Traceback: {exc!r}\n{traceback.format_exc()}")
            os.write(write_end, err.getvalue().encode())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        stderr = fh.read().decode()
    _, status = os.waitpid(pid, 0)
    proc = subprocess.CompletedProcess([], os.waitstatus_to_exitcode(status), "", stderr)
    assert "permission denied" in check_cli_rejection(proc, path)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_utf8_bom_is_accepted(tmp_path: Path, suffix: str) -> None:
    data = b"\xef\xbb\xbf" + bert_json()
    path = write(tmp_path, "bom" + suffix, gzip.compress(data, mtime=0) if suffix.endswith(".gz") else data)
    trace = kinetolens.load(path, cache=False)
    reference = kinetolens.load(BERT, cache=False)
    assert trace.kernels.height == reference.kernels.height > 0
    assert trace.kernels["dur"].sum() == reference.kernels["dur"].sum()


def test_utf8_bom_through_the_whole_file_reader(tmp_path: Path) -> None:
    """A BOM and a truncated tail: the recovering reader strips it too."""
    data = b"\xef\xbb\xbf" + bert_json()
    path = write(tmp_path, "bom_cut.json", data[: len(data) * 2 // 3])
    trace = kinetolens.load(path, cache=False)
    assert trace.ops.height > 0
    assert any("truncated" in w.kind for w in trace.warnings)


def test_lone_high_surrogate_is_replaced(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": "\ud800xyz", "ts": 10, "dur": 2, "pid": 0, "tid": 7,
         "args": {"correlation": 1, "stream": 7, "device": 0}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 20, "pid": 1, "tid": 1, "args": {}},
    ]
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps({"traceEvents": events}))  # json.dump writes "\ud800xyz"
    assert b"\\ud800xyz" in path.read_bytes()
    trace = kinetolens.load(path, cache=False)
    assert trace.kernels["name"].to_list() == ["\ufffdxyz"]
    assert [w.kind for w in trace.warnings] == ["invalid text replaced"]


def _zeros_bomb(tmp_path: Path, megabytes: int) -> Path:
    blob = gzip.compress(b'{"traceEvents": [' + b" " * (megabytes << 20) + b"]}", compresslevel=9, mtime=0)
    assert len(blob) < megabytes * 2048  # more than 500x
    return write(tmp_path, "bomb.json.gz", blob)


def test_gzip_bomb_stops_at_the_configured_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _zeros_bomb(tmp_path, 8)
    env = dict(os.environ, KINETOLENS_MAX_INFLATE="1M")
    proc = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "summary", "--no-cache", str(path)],
        check=False, capture_output=True, text=True, timeout=120, env=env,
    )
    problem = check_cli_rejection(proc, path)
    assert "gzip bomb" in problem and "1,048,576 bytes" in problem, problem
    monkeypatch.setenv("KINETOLENS_MAX_INFLATE", "1M")
    assert "gzip bomb" in load_rejection(path)


def test_gzip_bomb_stops_at_the_default_ratio(tmp_path: Path) -> None:
    """No limit set: 100 MiB of blanks from ~100 KB stops after 64 MiB, early."""
    path = _zeros_bomb(tmp_path, 100)
    problem = load_rejection(path)
    assert "inflates more than 200x" in problem, problem
    produced = int(problem.split("x (")[1].split(" bytes")[0].replace(",", ""))
    assert produced < 80 << 20


def test_real_traces_are_far_below_the_inflate_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KINETOLENS_MAX_INFLATE", raising=False)
    monkeypatch.delenv("KINETOLENS_MAX_INFLATE_RATIO", raising=False)
    assert kinetolens.load(BERT, cache=False).kernels.height > 0


def test_truncated_gzip_does_not_claim_most_of_the_trace(tmp_path: Path) -> None:
    """Cut in half: the warnings say what was kept, never a share of what was read."""
    blob = BERT.read_bytes()
    path = write(tmp_path, "cut.json.gz", blob[: len(blob) // 2])
    trace = kinetolens.load(path, cache=False)
    text = " | ".join(w.detail for w in trace.warnings)
    assert "%" not in text, text
    assert f"all {len(blob) // 2:,} compressed bytes" in text, text
    events = len(json.loads(bert_json())["traceEvents"])
    kept = int(text.split("kept the first ")[1].split(" events")[0].replace(",", ""))
    assert 0 < kept < events * 3 // 4


def test_nsys_schema_with_names_that_are_not_utf8_is_one_line(tmp_path: Path) -> None:
    """A flipped byte in the schema: sqlite3 itself cannot decode the table's columns."""
    blob = bytearray((BERT.parents[2] / "nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite").read_bytes())
    # The "E" of "TABLE" in a table's CREATE statement, as a fuzzed copy had it.
    blob[blob.index(b"CREATE TABLE CUDNN_EVENTS") + len("CREATE TABL")] = 0xBF
    path = write(tmp_path, "schema.sqlite", bytes(blob))
    assert "corrupt SQLite file" in check_cli_rejection(run_cli(path), path)
