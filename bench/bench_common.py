"""Helpers shared by the side-by-side benchmarks (``load_bench.py``, ``compare.py``).

Standard library only: the measured workers import this module from inside
the venvs of the reference tools, where kinetolens is not installed.

Why the pieces look the way they do:

* every measurement is a fresh process, so that its peak memory is its own;
* a tool may start helper processes (torch-tb-profiler parses each worker
  file in a spawned process and keeps a multiprocessing manager), so the
  worker is started in its own session and the parent samples the summed
  RSS of every process in that session, besides the worker's own high-water
  mark and ``wait4``'s ``ru_maxrss``;
* a tool that cannot cope with a trace must not hang or swap the machine:
  a wall-clock timeout and a memory cap on that summed RSS kill the whole
  session and the result says which limit was hit;
* reference tools live in their own venvs, and creating one aborts if pip
  would pull torch (or CUDA wheels) into it, since none of them needs torch
  to read a trace.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The real traces, in ``../shared`` beside the checkout.
TRACES = REPO.parent / "shared" / "traces"
#: Where every benchmark writes its table.
DOC = REPO / "docs" / "BENCHMARKS.md"
MB = 1024 * 1024
GIB = 1024 * MB
RESULT_TAG = "@@RESULT@@"
FORBIDDEN_IN_VENV = ("torch", "triton")
_PAGE = os.sysconf("SC_PAGE_SIZE")
#: How often the parent samples the memory of the worker's process tree.
SAMPLE_S = 0.05


# --------------------------------------------------------------------------
# worker side
# --------------------------------------------------------------------------

def proc_status_kb(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), -1 if absent."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def emit_result(out: dict) -> None:
    """Hand the worker's result to the parent on stdout, after anything the tool printed."""
    sys.stdout.write("\n" + RESULT_TAG + json.dumps(out) + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------
# parent side
# --------------------------------------------------------------------------

class WorkerFailed(RuntimeError):
    """A measured run did not produce a result.

    ``kind`` is ``"timeout"``, ``"oom"`` (our memory cap or the kernel's OOM
    killer) or ``"error"``; ``peak_kb`` is the largest tree RSS seen.
    """

    def __init__(self, kind: str, message: str, peak_kb: int = 0, wall_s: float = 0.0):
        super().__init__(message)
        self.kind = kind
        self.peak_kb = peak_kb
        self.wall_s = wall_s


def session_rss_kb(sid: int) -> int:
    """Summed RSS of every process whose session id is ``sid``.

    Processes a tool spawns stay in the worker's session even when they are
    re-parented, so this follows the whole tree without ``/proc/*/children``.
    """
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                stat = fh.read()
            fields = stat[stat.rindex(b")") + 2:].split()
            if int(fields[3]) != sid:  # state ppid pgrp session ...
                continue
            with open(f"/proc/{entry.name}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * _PAGE // 1024
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked
    return total


def run_measured(cmd: list[str], label: str, timeout: float, mem_cap_bytes: int | None = None,
                 env: dict | None = None, cwd: str | None = None) -> dict:
    """Run ``cmd`` (a worker that ends with :func:`emit_result`) and measure it.

    Returns the worker's result plus ``ru_maxrss_kb`` (``wait4``: the largest
    single process among the worker and the children it waited for),
    ``tree_peak_kb`` (largest sampled sum over the worker's session),
    ``peak_kb`` (the largest of those and the worker's own ``peak_rss_kb``)
    and ``process_wall_s``.  Raises :class:`WorkerFailed` on timeout, memory
    cap, or a worker that exits without a result.
    """
    env = dict(os.environ if env is None else env)
    env.setdefault("PYTHONHASHSEED", "0")
    cap_kb = mem_cap_bytes // 1024 if mem_cap_bytes else None
    tree_peak = 0
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env,
                                cwd=cwd or tempfile.gettempdir(), start_new_session=True)
        deadline = t0 + timeout
        killed: str | None = None
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            rss = session_rss_kb(proc.pid)
            tree_peak = max(tree_peak, rss)
            if cap_kb is not None and rss > cap_kb:
                killed = "oom"
            elif time.perf_counter() > deadline:
                killed = "timeout"
            if killed:
                _kill_session(proc.pid)
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(SAMPLE_S)
        _kill_session(proc.pid)  # helpers a tool left behind
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    tree_peak = max(tree_peak, ru.ru_maxrss)
    if killed == "timeout":
        raise WorkerFailed("timeout", f"{label}: timed out after {timeout:.0f} s", tree_peak, wall)
    if killed == "oom":
        raise WorkerFailed("oom", f"{label}: memory over the cap of {cap_kb / MB:.1f} GiB",
                           tree_peak, wall)
    if code == -signal.SIGKILL:
        raise WorkerFailed("oom", f"{label}: killed by SIGKILL (kernel OOM killer?) at "
                           f"{tree_peak / MB:.1f} GiB", tree_peak, wall)
    if code != 0 or RESULT_TAG not in stdout:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise WorkerFailed("error", f"{label}: exit {code}: {last}\n{stderr[-3000:]}", tree_peak, wall)
    res = json.loads(stdout.rsplit(RESULT_TAG, 1)[1].splitlines()[0])
    res["ru_maxrss_kb"] = ru.ru_maxrss
    res["tree_peak_kb"] = tree_peak
    res["peak_kb"] = max(res.get("peak_rss_kb", 0), ru.ru_maxrss, tree_peak)
    res["process_wall_s"] = wall
    return res


def _kill_session(sid: int) -> None:
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(venv: Path, spec: list[str], base_python: str,
                forbidden: tuple[str, ...] = FORBIDDEN_IN_VENV) -> Path:
    """Create ``venv`` with ``spec`` installed, once; reuse it while the spec matches.

    Resolves first and aborts (without installing) if anything in
    ``forbidden`` or an ``nvidia-*`` wheel would be installed.
    """
    py = venv_python(venv)
    ready = venv / ".loadbench-ready"
    want = "\n".join(spec)
    if py.exists() and ready.exists() and ready.read_text() == want:
        return py
    print(f"[setup] creating venv {venv} ({' '.join(spec)})", file=sys.stderr)
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([base_python, "-m", "venv", str(venv)], check=True)
    pip = [str(py), "-m", "pip", "--disable-pip-version-check"]
    with tempfile.NamedTemporaryFile(suffix=".json") as report_file:
        report = subprocess.run(
            pip + ["install", "--dry-run", "--quiet", "--report", report_file.name, *spec],
            check=False, capture_output=True, text=True,
        )
        if report.returncode != 0:
            shutil.rmtree(venv)
            sys.exit(f"[setup] pip could not resolve {spec}:\n{report.stderr[-4000:]}")
        names = sorted(i["metadata"]["name"].lower()
                       for i in json.loads(Path(report_file.name).read_text()).get("install", []))
    bad = [n for n in names if n in forbidden or n.startswith("nvidia-")]
    if bad:
        shutil.rmtree(venv)
        sys.exit(f"[setup] ABORT: installing {spec} would pull {bad} into {venv}; not installing.")
    inst = subprocess.run(pip + ["install", "--quiet", *spec], check=False,
                          capture_output=True, text=True)
    if inst.returncode != 0:
        sys.exit(f"[setup] pip install failed:\n{inst.stdout[-2000:]}\n{inst.stderr[-4000:]}")
    frozen = subprocess.run(pip + ["freeze"], check=True, capture_output=True, text=True).stdout
    for line in frozen.splitlines():
        n = line.split("==")[0].split(" @ ")[0].strip().lower()
        if n in forbidden or n.startswith("nvidia-"):
            sys.exit(f"[setup] ABORT: {line!r} ended up in {venv}")
    (venv / "loadbench-freeze.txt").write_text(frozen)
    ready.write_text(want)
    return py


def uncompressed_size(path: Path) -> int:
    """Bytes of JSON in ``path``, gunzipping it when it is gzip."""
    with path.open("rb") as fh:
        magic = fh.read(2)
    if magic != b"\x1f\x8b":
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            n += len(chunk)
    return n


def kinetolens_available(python: str) -> tuple[bool, str]:
    r = subprocess.run(
        [python, "-c", "import kinetolens; kinetolens.load"],
        check=False, capture_output=True, text=True, cwd=tempfile.gettempdir(),
    )
    return r.returncode == 0, (r.stderr.strip().splitlines() or [""])[-1]


def query_python(python: str | None, code: str) -> str:
    """What ``python -c code`` prints (a version string), ``"?"`` if it fails."""
    if not python:
        return "?"
    try:
        return subprocess.run([python, "-c", code], check=False, capture_output=True, text=True,
                              cwd=tempfile.gettempdir(), timeout=120).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def package_version(python: str | None, dist: str) -> str:
    return query_python(python, f"import importlib.metadata as m; print(m.version({dist!r}))")


def git_revision() -> str:
    """Short HEAD, marked when ``src`` has uncommitted changes (they are what ran)."""
    git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                         check=False, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "-uno", "--", "src"],
                           check=False, capture_output=True, text=True).stdout.strip()
    return git + ("+uncommitted src changes" if dirty else "")


def replace_doc_block(doc: Path, start: str, end: str, block: str) -> None:
    """Put ``block`` between the ``start``/``end`` markers of ``doc`` (appended if absent)."""
    block = f"{start}\n{block}\n{end}"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(text)
    print(f"[write] updated {doc}", file=sys.stderr)
