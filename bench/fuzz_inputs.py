"""Fuzz ``kinetolens summary`` with damaged copies of small real traces.

Each mutant (a byte flip, a cut, a value of the wrong type or out of range,
deep nesting, a gzip bomb, an empty file, bad text, an Nsight database
with wild values) of a Kineto ``.json``/``.json.gz`` or Nsight ``.sqlite``
trace from ``../shared/traces`` goes through ``kinetolens summary --json``
and must end in one of two ways: exit 0 with sane numbers (no negative or
day-long times, shares at most 1, all finite), or exit 2 with exactly one
stderr line naming the file.  A traceback, another exit status, a message
of several lines or not naming the file, or a run past the time limit is a
failure.

Mutants run in-process in a few long-lived worker processes (the CLI's
start-up would otherwise dominate); a worker that overruns is killed and
replaced, and its mutant counted as a hang.

    python bench/fuzz_inputs.py -n 1000 --seed 1          # class x outcome table
    python bench/fuzz_inputs.py -n 200 --seed 3 --keep DIR # keep failing mutants

``tests/ingest/test_fuzz_inputs.py`` runs a short seeded campaign of the same.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import os
import random
import re
import select
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"

#: Small real traces of each format: (name, path).
BASES: tuple[tuple[str, str], ...] = (
    ("kineto-json", "hta/call_stack/backward_thread.json"),
    ("kineto-gz", "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"),
    ("kineto-gz", "tracelens/torch_compile_triton/trace.json.gz"),
    ("nsys", "nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"),
)

CLASSES = (
    "byte-flip",
    "truncate",
    "wrong-type",
    "out-of-range",
    "deep-nesting",
    "gzip-bomb",
    "empty",
    "bad-text",
    "nsys-values",
)
OUTCOMES = ("loaded", "rejected", "insane-numbers", "bad-message", "traceback", "other-exit", "hang")
GOOD = ("loaded", "rejected")

DAY_US = 86_400e6
#: Per-mutant limit in the worker (seconds); the parent kills a worker this much later.
TIMEOUT_S = 20.0
KILL_GRACE_S = 10.0

_VALUE = re.compile(rb'"([A-Za-z][\w ]{0,30})": (-?\d[\d.eE+-]*|"[^"\\]{0,80}"|null|true|false)')
_NUMBER = re.compile(rb'"([A-Za-z][\w ]{0,30})": (-?\d[\d.eE+-]*)')
WRONG_TYPES = (b'"x"', b"[]", b"{}", b"null", b"true", b"1.5", b"-7", b'"12"', b'[1, "a"]', b'{"a": 1}')
OUT_OF_RANGE = (
    b"-1", b"0", b"-1e15", b"1e15", b"9223372036854775807", b"9223372036854775808", b"-9223372036854775808",
    b"18446744073709551616", b"1e300", b"1e-300", b"1e400", b"123456789012345678901234567890", b"-0.0", b"4.9e-324",
)
SQL_VALUES = (None, -1, 0, 2**63 - 1, -(2**63), "text", b"\x00\xff", 1e300, -1e300, 3.5)


# --------------------------------------------------------------------------- mutants


@dataclass(frozen=True)
class Mutant:
    klass: str
    base: str
    detail: str
    suffix: str
    data: bytes


def _json_of(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _pack(rng: random.Random, text: bytes, base_suffix: str) -> tuple[str, bytes]:
    """As .json or .json.gz (the base's kind most of the time)."""
    gz = base_suffix.endswith(".gz") if rng.random() < 0.75 else not base_suffix.endswith(".gz")
    return (".json.gz", gzip.compress(text, compresslevel=1, mtime=0)) if gz else (".json", text)


def _replace_match(rng: random.Random, text: bytes, pattern: re.Pattern[bytes], values: tuple[bytes, ...]) -> tuple[str, bytes]:
    matches = list(pattern.finditer(text))
    if not matches:
        return "no value", text
    m = rng.choice(matches)
    new = rng.choice(values)
    return f"{m.group(1).decode(errors='replace')}={new.decode()[:24]}", text[: m.start(2)] + new + text[m.end(2) :]


def _deep(rng: random.Random) -> bytes:
    n = rng.choice((1_500, 5_000, 100_000))
    if rng.random() < 0.5:
        return b"[" * n + b"]" * n
    return b'{"a": ' * n + b"1" + b"}" * n


@dataclass
class _Bombs:
    """Gzip bombs, made once: ~100 MiB of blanks inside a trace, and of zeros."""

    blank: bytes = b""
    zeros: bytes = b""

    def get(self, which: str) -> bytes:
        if not self.blank:
            comp = zlib.compressobj(9, zlib.DEFLATED, 31)
            parts = [comp.compress(b'{"traceEvents": [')]
            block = b" " * (1 << 20)
            parts += [comp.compress(block) for _ in range(100)]
            parts.append(comp.compress(b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7}]}'))
            parts.append(comp.flush())
            self.blank = b"".join(parts)
            comp = zlib.compressobj(9, zlib.DEFLATED, 31)
            zero = b"\0" * (1 << 20)
            self.zeros = b"".join([comp.compress(zero) for _ in range(100)] + [comp.flush()])
        return self.blank if which == "blank" else self.zeros


BOMBS = _Bombs()


def json_mutant(rng: random.Random, klass: str, base: str, path: Path) -> Mutant:
    text = _json_of(path)
    suffix = "".join(path.suffixes[-2:]) if path.name.endswith(".gz") else ".json"
    detail = ""
    if klass == "byte-flip":
        blob = bytearray(path.read_bytes() if rng.random() < 0.3 else text)
        packed = blob[:2] == b"\x1f\x8b"
        for _ in range(rng.randint(1, 8)):
            blob[rng.randrange(len(blob))] = rng.randrange(256)
        detail = "in the gzip stream" if packed else "in the JSON"
        if packed:
            return Mutant(klass, base, detail, ".json.gz", bytes(blob))
        suffix, data = _pack(rng, bytes(blob), suffix)
        return Mutant(klass, base, detail, suffix, data)
    if klass == "truncate":
        if rng.random() < 0.4:
            raw = gzip.compress(text, mtime=0)
            cut = rng.randrange(len(raw))
            return Mutant(klass, base, f"gzip cut at {cut}/{len(raw)}", ".json.gz", raw[:cut])
        cut = rng.randrange(len(text))
        suffix, data = _pack(rng, text[:cut], suffix)
        return Mutant(klass, base, f"JSON cut at {cut}/{len(text)}", suffix, data)
    if klass == "wrong-type":
        detail, text = _replace_match(rng, text, _VALUE, WRONG_TYPES)
    elif klass == "out-of-range":
        for _ in range(rng.randint(1, 3)):
            d, text = _replace_match(rng, text, _NUMBER, OUT_OF_RANGE)
            detail = f"{detail} {d}".strip()
    elif klass == "deep-nesting":
        matches = list(_VALUE.finditer(text))
        m = rng.choice(matches)
        text = text[: m.start(2)] + _deep(rng) + text[m.end(2) :]
        detail = f"under {m.group(1).decode(errors='replace')}"
    elif klass == "gzip-bomb":
        which = rng.choice(("blank", "zeros"))
        return Mutant(klass, base, f"100 MiB of {which}", ".json.gz", BOMBS.get(which))
    elif klass == "empty":
        body = rng.choice((b"", b" \n\t ", b"{}", b"[]", b'{"traceEvents": []}', b'{"traceEvents": [{}]}', b"[{}]", b"null", b"\xef\xbb\xbf"))
        if rng.random() < 0.3:
            return Mutant(klass, base, f"gzip of {body[:20]!r}", ".json.gz", gzip.compress(body, mtime=0))
        return Mutant(klass, base, repr(body[:20]), ".json", body)
    elif klass == "bad-text":
        how = rng.choice(("bom", "surrogate", "latin1", "nul", "long-name"))
        if how == "bom":
            text = b"\xef\xbb\xbf" + text
        else:
            strings = [m for m in _VALUE.finditer(text) if m.group(2).startswith(b'"')]
            m = rng.choice(strings)
            insert = {
                "surrogate": b"\\ud800xyz",
                "latin1": b"caf\xe9",
                "nul": b"\\u0000\x00",
                "long-name": b"x" * rng.choice((1 << 16, 1 << 22)),
            }[how]
            at = m.start(2) + 1
            text = text[:at] + insert + text[at:]
        detail = how
    suffix, data = _pack(rng, text, suffix)
    return Mutant(klass, base, detail, suffix, data)


def nsys_mutant(rng: random.Random, klass: str, base: str, path: Path, scratch: Path) -> Mutant:
    raw = path.read_bytes()
    if klass == "byte-flip":
        blob = bytearray(raw)
        for _ in range(rng.randint(1, 16)):
            blob[rng.randrange(len(blob))] = rng.randrange(256)
        return Mutant(klass, base, "", ".sqlite", bytes(blob))
    if klass == "truncate":
        cut = rng.randrange(len(raw))
        return Mutant(klass, base, f"cut at {cut}/{len(raw)}", ".sqlite", raw[:cut])
    if klass == "empty":
        return Mutant(klass, base, "header only", ".sqlite", raw[:100] if rng.random() < 0.5 else b"SQLite format 3\x00")
    # nsys-values, wrong-type, out-of-range: rewrite values in the database.
    work = scratch / f"nsys_{rng.randrange(1 << 30)}.sqlite"
    work.write_bytes(raw)
    with sqlite3.connect(work) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        wanted = [t for t in tables if t.startswith(("CUPTI_ACTIVITY_KIND", "TARGET_INFO", "NVTX", "StringIds"))] or tables
        table = rng.choice(wanted)
        cols = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
        col = rng.choice(cols)
        value = rng.choice(SQL_VALUES)
        share = rng.choice((0.01, 0.2, 1.0))
        try:
            db.execute(f'UPDATE "{table}" SET "{col}" = ? WHERE abs(random()) % 1000 < ?', (value, int(share * 1000)))
        except sqlite3.DatabaseError:  # a typed primary key or a constraint: that value cannot be stored
            value = "(refused by SQLite)"
    data = work.read_bytes()
    work.unlink()
    return Mutant(klass, base, f"{table}.{col}={value!r:.20} in {share:.0%} of rows", ".sqlite", data)


def mutants(seed: int, n: int, scratch: Path) -> Iterator[Mutant]:
    """``n`` mutants, the classes in turn, bases and details drawn from ``seed``."""
    rng = random.Random(seed)
    for i in range(n):
        klass = CLASSES[i % len(CLASSES)]
        if klass == "nsys-values":
            candidates = [(b, p) for b, p in BASES if b == "nsys"]
        elif klass in ("deep-nesting", "gzip-bomb", "bad-text"):
            candidates = [(b, p) for b, p in BASES if b != "nsys"]
        else:
            candidates = list(BASES)
        base, rel = rng.choice(candidates)
        path = TRACES / rel
        if base == "nsys":
            yield nsys_mutant(rng, klass, base, path, scratch)
        else:
            yield json_mutant(rng, klass, base, path)


# --------------------------------------------------------------------------- judging


def _insane(value: object, key: str = "") -> str:
    """The first number in ``summary --json`` output that no trace can have
    (``key``: its dotted path; list items share their list's)."""
    if isinstance(value, dict):
        for k, v in value.items():
            found = _insane(v, f"{key}.{k}" if key else str(k))
            if found:
                return found
        return ""
    if isinstance(value, list):
        for v in value:
            found = _insane(v, key)
            if found:
                return found
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    if not math.isfinite(value):
        return f"{key}={value}"
    name = key.rsplit(".", 1)[-1]
    times_us = name.endswith("_us") or "_us." in key
    if times_us and not 0 <= value <= DAY_US:
        return f"{key}={value}"
    if name.endswith("_ms") and not 0 <= value <= DAY_US / 1000:
        return f"{key}={value}"
    if (name in ("utilization", "sm_efficiency", "occupancy") or name.endswith("share")) and not 0 <= value <= 1 + 1e-9:
        return f"{key}={value}"
    if key.startswith("events.") and value < 0:
        return f"{key}={value}"
    return ""


def judge(path: str, rc: object, out: str, err: str) -> tuple[str, str]:
    """(outcome, why) of one run of ``summary --json PATH``."""
    if rc == "hang":
        return "hang", err[-200:]
    if "Traceback" in err or rc == "exception":
        return "traceback", err.strip().splitlines()[-1][:200] if err.strip() else ""
    if rc == 2:
        lines = err.splitlines()
        prefix = f"kinetolens: error: {path}: "
        if len(lines) == 1 and lines[0].startswith(prefix) and not out:
            return "rejected", lines[0][len(prefix) :][:160]
        return "bad-message", err[:200]
    if rc == 0:
        try:
            doc = json.loads(out)
        except ValueError:
            return "insane-numbers", "stdout is not JSON"
        found = _insane(doc)
        return ("insane-numbers", found) if found else ("loaded", f"{len(doc.get('warnings', []))} warnings")
    return "other-exit", f"rc={rc} {err[-200:]}"


# --------------------------------------------------------------------------- running


def worker() -> None:
    """Read mutant paths from stdin, run the CLI on each in-process, answer in JSON lines."""
    import resource
    import signal

    from kinetolens.cli.main import main

    limit = 6 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    def alarm(_signum: int, _frame: object) -> None:
        raise TimeoutError("mutant ran past the time limit")

    signal.signal(signal.SIGALRM, alarm)
    for line in sys.stdin:
        job = json.loads(line)
        out, err = io.StringIO(), io.StringIO()
        start = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, job["timeout"])
        rc: object
        try:
            with redirect_stdout(out), redirect_stderr(err):
                try:
                    main(["summary", "--json", "--no-cache", job["path"]])
                    rc = 0
                except SystemExit as exc:
                    rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except TimeoutError:
            rc = "hang"
        except BaseException:  # noqa: BLE001 - the finding itself
            rc = "exception"
            err.write(traceback.format_exc())
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        reply = {"rc": rc, "out": out.getvalue()[-(64 << 20) :], "err": err.getvalue()[-4000:], "s": time.perf_counter() - start}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


class Pool:
    """Long-lived worker processes; one that overruns is killed and replaced."""

    def __init__(self, size: int, timeout: float) -> None:
        self.timeout = timeout
        self.size = size
        self.lock = threading.Lock()

    def _start(self) -> subprocess.Popen[str]:
        env = dict(os.environ, POLARS_MAX_THREADS="1", KINETOLENS_DECODE_WORKERS="0", COLUMNS="120")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH", "")]))
        return subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, bufsize=1,
        )

    def run(self, jobs: list[str], on_result: Callable[[int, dict[str, object]], None]) -> None:
        queue = list(enumerate(jobs))

        def loop() -> None:
            proc = self._start()
            try:
                while True:
                    with self.lock:
                        if not queue:
                            return
                        index, path = queue.pop(0)
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write(json.dumps({"path": path, "timeout": self.timeout}) + "\n")
                    proc.stdin.flush()
                    ready, _, _ = select.select([proc.stdout], [], [], self.timeout + KILL_GRACE_S)
                    line = proc.stdout.readline() if ready else ""
                    if not line:
                        proc.kill()
                        proc.wait()
                        on_result(index, {"rc": "hang" if not ready else "died", "out": "", "err": "worker killed", "s": self.timeout})
                        proc = self._start()
                        continue
                    on_result(index, json.loads(line))
            finally:
                proc.kill()
                proc.wait()

        threads = [threading.Thread(target=loop) for _ in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


@dataclass
class Result:
    mutant: Mutant
    path: str
    outcome: str
    why: str
    seconds: float


def campaign(seed: int, n: int, workers: int = 2, timeout: float = TIMEOUT_S, keep: Path | None = None) -> list[Result]:
    """Make ``n`` mutants, run them all, and judge each."""
    with tempfile.TemporaryDirectory(prefix="kl_fuzz_") as tmp:
        scratch = Path(tmp)
        made: list[tuple[Mutant, str]] = []
        for i, m in enumerate(mutants(seed, n, scratch)):
            path = scratch / f"m{i:05d}_{m.klass}{m.suffix}"
            path.write_bytes(m.data)
            made.append((m, str(path)))
        results: list[Result | None] = [None] * len(made)

        def record(index: int, reply: dict[str, object]) -> None:
            mutant, path = made[index]
            outcome, why = judge(path, reply["rc"], str(reply["out"]), str(reply["err"]))
            results[index] = Result(mutant, path, outcome, why, float(reply["s"]))  # type: ignore[arg-type]
            if keep is not None and outcome not in GOOD:
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, keep / Path(path).name)

        Pool(workers, timeout).run([p for _, p in made], record)
    return [r for r in results if r is not None]


def table(results: list[Result]) -> str:
    """A markdown class x outcome table of counts."""
    counts = Counter((r.mutant.klass, r.outcome) for r in results)
    classes = [c for c in CLASSES if any(k == c for k, _ in counts)]
    lines = ["| class | " + " | ".join(OUTCOMES) + " | total |", "|---|" + "---:|" * (len(OUTCOMES) + 1)]
    for c in classes:
        row = [counts[(c, o)] for o in OUTCOMES]
        lines.append(f"| {c} | " + " | ".join(str(v) for v in row) + f" | {sum(row)} |")
    totals = [sum(counts[(c, o)] for c in classes) for o in OUTCOMES]
    lines.append("| **all** | " + " | ".join(f"**{v}**" for v in totals) + f" | **{sum(totals)}** |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=200, help="mutants to run (default 200)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per mutant")
    parser.add_argument("--keep", type=Path, help="copy failing mutants here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    start = time.perf_counter()
    results = campaign(args.seed, args.n, args.workers, args.timeout, args.keep)
    wall = time.perf_counter() - start
    print(f"{len(results)} mutants, seed {args.seed}, {args.workers} workers, {wall:.0f} s "
          f"(slowest mutant {max(r.seconds for r in results):.1f} s)\n")
    print(table(results))
    bad = [r for r in results if r.outcome not in GOOD]
    for r in bad[:40]:
        print(f"\n{r.outcome}: {r.mutant.klass} of {r.mutant.base} ({r.mutant.detail}): {r.why}")
    rejected = Counter(re.sub(r"\d[\d,]*", "N", r.why)[:70] for r in results if r.outcome == "rejected")
    print("\nmost common rejections:")
    for why, k in rejected.most_common(12):
        print(f"  {k:4d}  {why}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
