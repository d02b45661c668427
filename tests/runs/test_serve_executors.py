"""``kinetolens serve`` and the run executors say and do what they were asked.

Real subprocesses only: ``kinetolens serve --port 0`` on loopback, ``kinetolens
dist`` against a closed loopback port and against a Dask scheduler and worker
started as separate processes in another directory than the client's.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kinetolens.errors import TraceError
from kinetolens.runs import LocalExecutor, executor_for
from kinetolens.runs.executors import DaskExecutor
from tests.conftest import place, trace_path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gen_ranks import generate

SOURCE = "hta/trace_filter/sampled_rank-0.json.gz"


def kinetolens(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kinetolens.cli.main", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exec") / "run"
    generate(trace_path(SOURCE), out, 4, 2, keep_every=64, seed=5)
    return out


# -- serve ---------------------------------------------------------------------

def test_serve_port_0_prints_the_port_it_bound(tmp_path: Path) -> None:
    # `serve --port 0` used to print http://127.0.0.1:0/, which no browser can open
    (tmp_path / "logdir" / "run").mkdir(parents=True)
    place(tmp_path / "logdir" / "run" / "rank-0.json.gz", trace_path(SOURCE))  # a copy: links out of the logdir are not served
    proc = subprocess.Popen(
        [sys.executable, "-m", "kinetolens.cli.main", "serve", "--logdir", str(tmp_path / "logdir"), "--port", "0"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m is not None, line
        port = int(m.group(1))
        assert port != 0
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/api/runs")
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["runs"][0]["run"] == "run"
        # the address given to --host (the loopback default) decides which Host headers are answered
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/api/runs", headers={"Host": f"rebound.example:{port}"})
        assert conn.getresponse().status == 403
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_keeps_room_for_a_diff(tmp_path: Path) -> None:
    # --keep 1 could never show a diff, it is refused up front
    result = kinetolens("serve", "--logdir", str(tmp_path), "--keep", "1", "--port", "0", timeout=30)
    assert result.returncode == 2 and "--keep" in result.stderr and "Traceback" not in result.stderr


def test_serve_on_a_busy_port_is_one_line(tmp_path: Path) -> None:
    # binding before serving (to print the real port) must not turn a busy port into a traceback
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = kinetolens("serve", "--logdir", str(tmp_path), "--port", str(port), timeout=30)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and str(port) in result.stderr


# -- executors -----------------------------------------------------------------

@pytest.mark.parametrize("spec", ["local:0", "local:-3", "local:x", "local:"])
def test_local_executor_needs_one_worker_or_more(run_dir: Path, spec: str) -> None:
    # local:0 and local:-3 used to run silently with one worker
    with pytest.raises(TraceError, match="1 or more"):
        executor_for(spec)
    result = kinetolens("dist", str(run_dir), "--executor", spec, "--no-cache", timeout=60)
    assert result.returncode == 2, result.stdout
    err = result.stderr.strip()
    assert err.count("\n") == 0 and spec in err and "Traceback" not in err


def test_local_executor_object_refuses_zero_workers() -> None:
    # the same from Python
    with pytest.raises(ValueError, match="at least 1"):
        LocalExecutor(workers=0)
    assert executor_for("local:3").workers == 3  # type: ignore[attr-defined]


def test_unreachable_scheduler_fails_within_seconds(run_dir: Path) -> None:
    # a closed port used to cost Dask's 30 s connect timeout
    pytest.importorskip("distributed")
    address = f"127.0.0.1:{closed_port()}"
    t0 = time.monotonic()
    result = kinetolens("dist", str(run_dir), "--executor", f"dask://{address}", "--no-cache", timeout=90)
    took = time.monotonic() - t0
    assert result.returncode == 2
    err = result.stderr.strip()
    assert err.count("\n") == 0 and f"tcp://{address}" in err and "cannot reach the Dask scheduler" in err
    assert took < 10, took  # interpreter start and imports included; the probe itself is immediate
    t0 = time.monotonic()
    with pytest.raises(TraceError, match="cannot reach"):
        DaskExecutor(f"tcp://{address}").map(str, ["x"])
    assert time.monotonic() - t0 < 4


def start_cluster(where: Path, workers: int) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A Dask scheduler and ``workers`` worker processes, each a separate
    process working in ``where``; their address and the processes."""
    info = where / "scheduler.json"
    env = dict(os.environ)
    quiet = {"cwd": where, "env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
         "--no-dashboard", "--scheduler-file", str(info)], **quiet)]  # type: ignore[call-overload]  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not info.exists() or not info.read_text().strip():
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.2)
        address = json.loads(info.read_text())["address"]
        if workers:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(info), "--nthreads", "1",
                 "--nworkers", str(workers), "--no-dashboard", "--host", "127.0.0.1"], **quiet))  # type: ignore[call-overload]  # fmt: skip
            from distributed import Client

            with Client(address, timeout=30) as client:
                client.wait_for_workers(workers, timeout=60)
    except BaseException:
        stop(procs)
        raise
    return address, procs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in reversed(procs):
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()


@pytest.fixture
def scheduler_elsewhere(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A scheduler and one worker whose working directory is not the client's."""
    pytest.importorskip("distributed")
    elsewhere = tmp_path / "worker-cwd"
    elsewhere.mkdir()
    address, procs = start_cluster(elsewhere, workers=1)
    try:
        yield address, elsewhere
    finally:
        stop(procs)


def test_relative_cache_dir_is_the_clients_on_dask_workers(
    run_dir: Path, tmp_path: Path, scheduler_elsewhere: tuple[str, Path]
) -> None:
    # a relative --cache-dir was sent as it is, so each worker
    # wrote the cache under its own working directory
    address, elsewhere = scheduler_elsewhere
    here = tmp_path / "client-cwd"
    here.mkdir()
    result = kinetolens("dist", str(run_dir), "--executor", f"dask://{address.removeprefix('tcp://')}",
                        "--cache-dir", "rel-cache", "--json", cwd=here, timeout=180)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["run"]["ranks"] == 4
    written = [p for p in (here / "rel-cache").rglob("*") if p.is_file()]
    assert len(written) >= 4  # one entry per rank, where the client said
    assert not (elsewhere / "rel-cache").exists()


@pytest.mark.parametrize(("spec", "problem"), [
    ("inproc://x", "unknown executor"),  # such a scheduler lives in one process; none runs in kinetolens'
    ("tcp://127.0.0.1", "missing port"),
    ("dask://127.0.0.1:99999", "port 99999 is not 1-65535"),
])  # fmt: skip
def test_bad_scheduler_addresses_are_one_line_errors(run_dir: Path, spec: str, problem: str) -> None:
    # these ended in a Dask traceback, inproc:// after 20 s
    pytest.importorskip("distributed")
    t0 = time.monotonic()
    result = kinetolens("dist", str(run_dir), "--executor", spec, "--no-cache", timeout=90)
    assert result.returncode == 2
    err = result.stderr.strip()
    assert err.count("\n") == 0 and problem in err and "Traceback" not in err, err
    assert time.monotonic() - t0 < 10


def test_scheduler_without_workers_is_an_error_not_a_wait(run_dir: Path, tmp_path: Path) -> None:
    # a scheduler whose workers never came waited without end
    pytest.importorskip("distributed")
    from kinetolens.runs import summarize_run

    address, procs = start_cluster(tmp_path, workers=0)
    try:
        t0 = time.monotonic()
        with pytest.raises(TraceError, match="no workers"):
            summarize_run(run_dir, DaskExecutor(address, workers_timeout_s=2), cache=False)
        assert time.monotonic() - t0 < 20
    finally:
        stop(procs)
