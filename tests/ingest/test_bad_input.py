"""Bad input: one clear line on stderr, exit status 2, never a traceback.

Every damaged file is made from a copy of a real trace in ``../shared``
(the originals are only read).  Each rejected file goes through the real CLI
in a subprocess and through ``kinetolens.load`` in-process.  Recoverable
damage (a truncated tail) must load what is intact with a counted warning and
must not change any number that survived.

The rejected cases are declared in ``BAD`` and their CLI runs are started all
at once by one module fixture: process start-up (Python + polars) dominates,
and running ~70 of them one after another would take most of the time budget.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

import kinetolens
from kinetolens import TraceError, TraceWarning

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TRACES = SHARED / "traces"
BERT = TRACES / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
ALEXNET = TRACES / "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
EXEC_TRACE = TRACES / "hta/execution_trace/benchmark_simple_add_et.json.gz"
ROCPROF = TRACES / "tracelens/rocprof/908_results.json.gz"  # rocprofv3 JSON: a negative input
LEGACY = TRACES / "kineto_legacy/resnet50_num_workers_0_2020-12/worker0.pt.trace.json.gz"

# the real traces are part of the test
# fixtures; without ../shared the tests fail, they do not skip.

OUT_OF_RANGE = ("out of range", "does not fit")


# --------------------------------------------------------------------------- helpers


def run_cli(path: Path, command: str = "summary", *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", POLARS_MAX_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", command, "--no-cache", *extra, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def check_cli_rejection(proc: subprocess.CompletedProcess[str], path: Path) -> str:
    """Exit 2 and exactly one stderr line naming the file; returns the problem."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    prefix = f"kinetolens: error: {path}: "
    assert lines[0].startswith(prefix), lines[0]
    assert proc.stdout == "", proc.stdout
    return lines[0][len(prefix) :]


def load_rejection(path: Path) -> str:
    """``kinetolens.load`` raises a one-line TraceError naming the file."""
    with pytest.raises(TraceError) as info:
        kinetolens.load(path, cache=False)
    text = str(info.value)
    assert "\n" not in text, text
    assert text.startswith(f"{path}: "), text
    return text[len(f"{path}: ") :]


def check_words(problem: str, words: tuple[str, ...], any_of: tuple[str, ...] = ()) -> None:
    # Only the problem text is searched: the temporary path names the test.
    for word in words:
        assert word.lower() in problem.lower(), f"{word!r} not in {problem!r}"
    if any_of:
        assert any(w.lower() in problem.lower() for w in any_of), f"none of {any_of} in {problem!r}"


@cache
def gunzipped(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes())


def bert_json() -> bytes:
    return gunzipped(BERT)


def write(directory: Path, name: str, data: bytes) -> Path:
    out = directory / name
    out.write_bytes(data)
    return out


def maybe_gzip(name: str, data: bytes) -> bytes:
    return gzip.compress(data, mtime=0) if name.endswith(".gz") else data


def nth_kernel(text: bytes, n: int = 0) -> int:
    """Byte offset of the ``n``-th kernel event's ``"cat": "kernel"`` key."""
    pos = -1
    for _ in range(n + 1):
        pos = text.index(b'"cat": "kernel"', pos + 1)
    return pos


def edit_kernel(text: bytes, field: str, new_value: bytes) -> bytes:
    """``text`` with ``field``'s value in its first kernel event replaced."""
    start = nth_kernel(text)
    m = re.compile(rb'"%s": ([^,\s}]+)' % field.encode()).search(text, start)
    assert m is not None and m.start() - start < 2000, field
    return text[: m.start(1)] + new_value + text[m.end(1) :]


def epoch_float_times(text: bytes) -> bytes:
    """Timestamps past 2**53 ns as float us: ingest keeps them as exact text."""
    return re.sub(rb'"ts": (\d+\.\d+)', rb'"ts": 1\1', text)


def device_rows(trace: kinetolens.Trace) -> dict[int, tuple[str, int, int]]:
    k = trace.kernels
    return {c: (n, t, d) for c, n, t, d in zip(k["correlation"], k["name"], k["ts"], k["dur"])}


def assert_intact_prefix(original_path: Path, recovered: kinetolens.Trace) -> None:
    """The recovered device activities are exactly the original's first ones, unchanged."""
    orig = device_rows(kinetolens.load(original_path, cache=False))
    got = device_rows(recovered)
    assert 0 < len(got) < len(orig), (len(got), len(orig))
    events = json.loads(gunzipped(original_path))["traceEvents"]
    file_order = [
        e["args"]["correlation"]
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") not in ("cuda_runtime", "cuda_driver")
        and (e.get("args") or {}).get("correlation") in orig
    ]
    assert set(got) == set(file_order[: len(got)])
    for corr, row in got.items():
        assert row == orig[corr], (corr, row, orig[corr])


# --------------------------------------------------------------------------- rejected inputs


@dataclass(frozen=True)
class Bad:
    """A damaged file (written by ``make`` into an empty directory) and its error.

    ``cli=False`` marks a variant of a case that already goes through the
    CLI: only ``kinetolens.load`` is checked (a TraceError is exactly what
    the CLI turns into one line and exit 2), which keeps the file fast.
    """

    make: Callable[[Path], Path]
    words: tuple[str, ...] = ()
    any_of: tuple[str, ...] = ()
    command: str = "summary"
    cli: bool = True


BAD: dict[str, Bad] = {}


def bad(name: str, make: Callable[[Path], Path], *words: str, any_of: tuple[str, ...] = (),
        commands: tuple[str, ...] = ("summary",), cli: bool = True) -> None:
    for command in commands:
        key = name if command == "summary" else f"{name}-{command}"
        BAD[key] = Bad(make, words, any_of, command, cli)


def file_of(name: str, data: Callable[[], bytes]) -> Callable[[Path], Path]:
    """Writes ``data()`` as ``name``, gzip-compressed when ``name`` ends in .gz
    and the data is not gzip already."""

    def make(directory: Path) -> Path:
        blob = data()
        return write(directory, name, blob if blob.startswith(b"\x1f\x8b") else maybe_gzip(name, blob))

    return make


# 1. Not a Kineto trace at all.
bad("png", file_of("image.png", lambda: b"\x89PNG\r\n\x1a\n" + random.Random(1).randbytes(4000)),
    "not a JSON trace", "PNG")
bad("elf", file_of("prog.json", lambda: b"\x7fELF\x02\x01\x01\x00" + random.Random(2).randbytes(4000)),
    "not a JSON trace", "ELF")
bad("zip", file_of("model.pt", lambda: b"PK\x03\x04" + random.Random(4).randbytes(400)),
    "not a JSON trace", "zip")
bad("random-bytes", file_of("noise.json", lambda: b"\x00" + random.Random(3).randbytes(8000)),
    "not a JSON trace")
bad("text", file_of("notes.json", lambda: b"hello, this is not a trace\n"), "not a JSON trace", cli=False)
bad("empty", file_of("empty.json", lambda: b""), "empty", commands=("summary", "ops"))
bad("whitespace", file_of("blank.json", lambda: b"  \n\n\t "), "not a JSON trace", cli=False)
bad("missing", lambda d: d / "nope.json.gz", "no such file", commands=("summary", "kernels"))
bad("directory", lambda d: d, "directory", commands=("summary", "ops"))
bad("nsys-sqlite", file_of("report.sqlite", lambda: b"SQLite format 3\x00" + random.Random(5).randbytes(4096)),
    "SQLite")
bad("execution-trace", file_of(EXEC_TRACE.name, EXEC_TRACE.read_bytes), "execution trace")
bad("rocprof", file_of(ROCPROF.name, ROCPROF.read_bytes), "rocprofv3", "not a Kineto trace")


# 2. Damaged gzip.
def _corrupt(path: Path, where: float, n: int) -> Callable[[], bytes]:
    def data() -> bytes:
        blob = bytearray(path.read_bytes())
        at = int(len(blob) * where)
        blob[at : at + n] = random.Random(at).randbytes(n)
        return bytes(blob)

    return data


def _stored_block_digit_flip() -> bytes:
    # Stored (level 0) deflate blocks decode anything: a changed digit is only
    # caught by the CRC32 at the end, after the wrong number was decoded.
    text = bert_json()
    m = re.compile(rb'"dur": (\d)').search(text, nth_kernel(text))
    assert m is not None
    blob = bytearray(gzip.compress(text, compresslevel=0, mtime=0))
    context = text[m.start(1) - 40 : m.start(1)]
    at = blob.index(context) + len(context)
    blob[at] = ord("9") if blob[at] != ord("9") else ord("1")
    return bytes(blob)


def _crc_flip() -> bytes:
    blob = bytearray(BERT.read_bytes())
    blob[-8] ^= 0xFF  # the CRC32 in the gzip trailer
    return bytes(blob)


bad("gzip-cut-at-300-bytes", file_of("head.json.gz", lambda: BERT.read_bytes()[:300]), "truncated")
bad("gzip-cut-in-header", file_of("header.json.gz", lambda: BERT.read_bytes()[:6]), "truncated")
for _where in (0.3, 0.8):
    bad(f"gzip-corrupt-at-{_where}", file_of("corrupt.json.gz", _corrupt(BERT, _where, 64)), "corrupt gzip",
        cli=_where == 0.3)
# Damage noticed only after the first megabyte was already decompressed.
bad("gzip-corrupt-after-1MB", file_of("legacy.json.gz", _corrupt(LEGACY, 0.95, 32)), "corrupt gzip", cli=False)
bad("gzip-stored-block-digit", file_of("stored.json.gz", _stored_block_digit_flip), "corrupt gzip")
bad("gzip-crc", file_of("crc.json.gz", _crc_flip), "corrupt gzip", cli=False)


# 3. Damaged JSON.
def _syntax_error_at() -> int:
    text = bert_json()
    return text.index(b",", len(text) // 2)


def _syntax_error() -> bytes:
    text, at = bert_json(), _syntax_error_at()
    return text[:at] + b";" + text[at + 1 :]


def _meta_only() -> bytes:
    text = bert_json()
    return text[: text.index(b'"traceEvents"') - 10]


bad("json-syntax-error.json", file_of("syntax.json", _syntax_error), "invalid JSON", "byte ",
    commands=("summary", "kernels"))
bad("json-syntax-error.json.gz", file_of("syntax.json.gz", _syntax_error), "invalid JSON", "byte ",
    commands=("ops",))
bad("json-cut-before-traceEvents", file_of("meta.json", _meta_only), "truncated", "traceEvents")

# 4. NaN and Infinity (what Python's json.dump writes for non-finite floats).
for _field, _token in (("dur", "NaN"), ("ts", "NaN"), ("ts", "Infinity"), ("dur", "-Infinity")):
    bad(f"{_token}-{_field}",
        file_of("nan.json", lambda f=_field, t=_token: edit_kernel(bert_json(), f, t.encode())),
        "invalid JSON", _token.lstrip("-"), cli=(_field, _token) in (("dur", "NaN"), ("ts", "Infinity")))


# 5. Invalid UTF-8 loads with U+FFFD and a counted warning: tests/ingest/test_text.py.

# 6. No (usable) traceEvents.
for _i, (_body, _words) in enumerate(
    [
        (b'{"foo": 1}', ("traceEvents",)),
        (b'{"traceEvents": []}', ("no events",)),
        (b'{"traceEvents": 5}', ("traceEvents", "not an array")),
        (b'{"traceEvents": null, "x": 1}', ("traceEvents", "not an array")),
        (b"[]", ("no events",)),
        (b"42", ("not a JSON trace",)),
    ]
):
    bad(f"container-{_i}", file_of("small.json", lambda b=_body: b), *_words, cli=_i < 3)


# 7. Durations.
def _no_dur() -> bytes:
    text = bert_json()
    m = re.compile(rb'\s*"dur": [^,]+,').search(text, nth_kernel(text))
    assert m is not None
    return text[: m.start()] + text[m.end() :]


bad("negative-dur", file_of("negdur.json", lambda: edit_kernel(bert_json(), "dur", b"-3.136")), "negative", "dur")
bad("missing-dur", file_of("nodur.json", _no_dur), "no duration", "dur")

# 8. Huge values: never wrapped, clipped, turned into inf or silently dropped.
for _field, _value in [
    ("ts", "1e300"),
    ("ts", "1e400"),
    ("dur", "1e30"),
    ("dur", "1e400"),
    ("dur", "1.7e306"),
    ("correlation", str(2**70)),
    ("correlation", str(2**64 - 1)),
    ("stream", str(2**70)),
]:
    bad(f"huge-{_field}-{_value[:8]}",
        file_of("huge.json", lambda f=_field, v=_value: edit_kernel(bert_json(), f, v.encode())),
        any_of=OUT_OF_RANGE, cli=(_field, _value) in (("ts", "1e300"), ("dur", "1e30"), ("correlation", str(2**70))))
for _field, _value in [("ts", "1e400"), ("dur", "1.7e306")]:
    bad(f"huge-exact-time-{_field}-{_value}",
        file_of("epoch.json", lambda f=_field, v=_value: edit_kernel(epoch_float_times(bert_json()), f, v.encode())),
        any_of=OUT_OF_RANGE, cli=False)
# ts fits, ts + dur does not: every end time computed later would wrap.
bad("huge-end-time",
    file_of("end.json", lambda: edit_kernel(bert_json(), "ts", str((2**63 - 1) // 1000).encode())),
    any_of=OUT_OF_RANGE, cli=False)
# A forward-backward flow (launch arrows, "ac2g", are not read: the kernels hold their ids).
bad("huge-flow-id",
    file_of("flow.json", lambda: re.sub(rb'("ph": "f",\s*"id": )\d+([^}]*?"cat": )"ac2g"',
                                        rb"\g<1>" + str(2**70).encode() + rb'\g<2>"fwdbwd"', bert_json(), count=1)),
    any_of=OUT_OF_RANGE, cli=False)
# Every timestamp huge: caught by the sampled time-base probe.
bad("huge-ts-everywhere", file_of("allts.json", lambda: re.sub(rb'"ts": [0-9.]+', b'"ts": 1e300', bert_json())),
    "out of range", cli=False)


@pytest.fixture(scope="module")
def rejected(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Path, subprocess.CompletedProcess[str] | None]]:
    """Write every damaged file, then run the CLI on all of them concurrently."""
    base = tmp_path_factory.mktemp("bad_input")
    paths: dict[str, Path] = {}
    for i, (key, case) in enumerate(BAD.items()):
        directory = base / f"case{i:03d}"
        directory.mkdir()
        paths[key] = case.make(directory)
    workers = max(4, 2 * (os.cpu_count() or 1))
    via_cli = [key for key, case in BAD.items() if case.cli]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        procs = dict(zip(via_cli, pool.map(lambda key: run_cli(paths[key], BAD[key].command), via_cli)))
    return {key: (paths[key], procs.get(key)) for key in BAD}


@pytest.mark.parametrize("key", list(BAD))
def test_rejected(key: str, rejected: dict[str, tuple[Path, subprocess.CompletedProcess[str] | None]]) -> None:
    case = BAD[key]
    path, proc = rejected[key]
    if proc is not None:
        check_words(check_cli_rejection(proc, path), case.words, case.any_of)
    if case.command == "summary":
        check_words(load_rejection(path), case.words, case.any_of)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_syntax_error_names_the_byte(tmp_path: Path, suffix: str) -> None:
    """The offset is the bad byte's, in the (decompressed) JSON."""
    path = write(tmp_path, "syntax" + suffix, maybe_gzip(suffix, _syntax_error()))
    problem = load_rejection(path)
    assert f"byte {_syntax_error_at()}" in problem and "truncated" not in problem, problem


# --------------------------------------------------------------------------- recoverable damage


def test_gzip_truncated_in_the_middle_loads_the_intact_prefix(tmp_path: Path) -> None:
    blob = ALEXNET.read_bytes()
    path = write(tmp_path, "alexnet_cut.json.gz", blob[: len(blob) * 6 // 10])
    trace = kinetolens.load(path, cache=False)
    assert all(isinstance(w, TraceWarning) and w.count >= 1 for w in trace.warnings)
    assert any("truncated" in f"{w.kind} {w.detail}" for w in trace.warnings), trace.warnings
    assert trace.events.height < kinetolens.load(ALEXNET, cache=False).events.height
    assert_intact_prefix(ALEXNET, trace)

    proc = run_cli(path, "summary", "--json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    warnings = json.loads(proc.stdout)["warnings"]
    assert any("truncated" in f"{w['kind']} {w['detail']}" and w["count"] >= 1 for w in warnings), warnings
    proc = run_cli(path, "summary")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "truncated" in proc.stdout


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_json_truncated_mid_event_loads_with_warning(tmp_path: Path, suffix: str) -> None:
    text = bert_json()
    cut = nth_kernel(text, 20) + 150  # inside the 21st kernel event
    path = write(tmp_path, "bert_cut" + suffix, maybe_gzip(suffix, text[:cut]))
    trace = kinetolens.load(path, cache=False)
    warned = [w for w in trace.warnings if w.kind == "truncated JSON"]
    assert len(warned) == 1 and warned[0].count == 1, trace.warnings
    assert trace.events.height < kinetolens.load(BERT, cache=False).events.height
    assert_intact_prefix(BERT, trace)
    assert trace.kernels.height == 20 + 1  # 20 kernels and the memcpy before them

    proc = run_cli(path, "summary", "--json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert any(w["kind"] == "truncated JSON" and w["count"] == 1 for w in json.loads(proc.stdout)["warnings"])


def test_gzip_trailing_garbage_is_a_warning(tmp_path: Path) -> None:
    path = write(tmp_path, "bert_tail.json.gz", BERT.read_bytes() + b"\x00\x00junk after the stream")
    trace = kinetolens.load(path, cache=False)
    assert [w.kind for w in trace.warnings] == ["damaged compression"], trace.warnings
    assert "trailing garbage" in trace.warnings[0].detail
    assert device_rows(trace) == device_rows(kinetolens.load(BERT, cache=False))


def test_concatenated_gzip_members_load_whole(tmp_path: Path) -> None:
    text = bert_json()
    half = len(text) // 2
    path = write(tmp_path, "bert_2members.json.gz", gzip.compress(text[:half]) + gzip.compress(text[half:]))
    trace = kinetolens.load(path, cache=False)
    assert trace.warnings == []
    assert device_rows(trace) == device_rows(kinetolens.load(BERT, cache=False))


def test_exact_time_trace_still_loads(tmp_path: Path) -> None:
    path = write(tmp_path, "epoch.json", epoch_float_times(bert_json()))
    trace = kinetolens.load(path, cache=False)
    assert trace.warnings == [] and trace.kernels.height == 61


def test_args_of_the_wrong_type_skip_that_event_with_a_warning(tmp_path: Path) -> None:
    # Args are decoded per table after the events themselves; an op whose
    # "External id" is a string must still be skipped and counted, as any
    # malformed event is, and "args": null must read as no args at all.
    text = bert_json()
    wrong = re.sub(rb'("cat": "cpu_op",[^{]*"args": \{\s*"External id": )\d+', rb'\1"x"', text, count=1)
    assert wrong != text
    path = write(tmp_path, "bert_bad_args.json", wrong)
    trace = kinetolens.load(path, cache=False)
    original = kinetolens.load(BERT, cache=False)
    assert [(w.kind, w.count) for w in trace.warnings] == [("malformed events skipped", 1)], trace.warnings
    assert "$.args.External id" in trace.warnings[0].detail
    assert trace.ops.height == original.ops.height - 1
    assert device_rows(trace) == device_rows(original)

    threads = re.sub(rb'("name": "thread_name",[^{]*"args": )\{[^}]*\}', rb"\1null", text, count=1)
    assert threads != text
    trace = kinetolens.load(write(tmp_path, "bert_null_args.json", threads), cache=False)
    assert trace.warnings == []
    assert trace.threads.height == original.threads.height - 1


# --------------------------------------------------------------------------- 9. legacy layout


def test_legacy_bare_array_loads() -> None:
    trace = kinetolens.load(LEGACY, cache=False)
    assert trace.format == "kineto-legacy-array"
    assert trace.kernels.height > 0
    assert trace.warnings == []
    proc = run_cli(LEGACY, "summary", "--json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads(proc.stdout)["format"] == "kineto-legacy-array"


def test_original_traces_load_clean() -> None:
    for path in (BERT, ALEXNET):
        assert kinetolens.load(path, cache=False).warnings == []
