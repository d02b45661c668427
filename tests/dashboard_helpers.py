"""Helpers for the dashboard tests: a logdir of real traces and a real ``kinetolens serve``."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.conftest import place, trace_path

H100 = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
V100 = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RANKS = ("hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz")
CONTROL = "hta/trace_diff/control/control.json.gz"
TEST = "hta/trace_diff/test/test.json.gz"
LARGE = "hta/df_index_resolver/df_index_resolver.json.gz"
FALCON = "tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz"
NSYS = "nsys/pipit_perlmutter-cloverleaf-cuda.sqlite"  # nsys 2024.5: CUDA kernels, no NVTX
NSYS_MPI = "nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"  # nsys 2022.2: NVTX ranges become ops
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]  # fmt: skip


def build_logdir(root: Path) -> Path:
    """A torch-tb-profiler-style logdir: copies of real traces, one run per case, and a corrupt run."""
    layout = {
        "h100": {"qwen.pt.trace.json.gz": H100},
        "v100": {"worker0.1623143089861.pt.trace.json.gz": V100},
        "multi": {"rank-0.pt.trace.json.gz": RANKS[0], "rank-1.pt.trace.json.gz": RANKS[1]},
        "control": {"worker0.pt.trace.json.gz": CONTROL},
        "test": {"worker0.pt.trace.json.gz": TEST},
        "nsys": {"cloverleaf.sqlite": NSYS},
        "nsys_mpi": {"saxpy_rank0.sqlite": NSYS_MPI},
    }
    for run, files in layout.items():
        (root / run).mkdir(parents=True)
        for name, rel in files.items():
            place((root / run / name), trace_path(rel))
    (root / "corrupt").mkdir()
    (root / "corrupt" / "worker0.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "name": "aten::mm", ')
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Client:
    """Raw HTTP GETs against a dashboard on loopback."""

    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, raw_path: str, timeout: float = 10.0, host: str | None = None) -> tuple[int, bytes]:
        """GET ``raw_path`` exactly as written (no normalisation of ``..`` or escapes);
        ``host``: the Host header to send instead of ``127.0.0.1:PORT``."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.putrequest("GET", raw_path, skip_host=host is not None, skip_accept_encoding=True)
            if host is not None:
                conn.putheader("Host", host)
            conn.endheaders()
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def get_json(self, raw_path: str, timeout: float = 10.0, host: str | None = None) -> tuple[int, Any]:
        status, body = self.get(raw_path, timeout, host)
        return status, json.loads(body)

    def wait_ready(self, run: str, worker: str, timeout: float = 60.0) -> None:
        from urllib.parse import urlencode

        q = urlencode({"run": run, "worker": worker, "load": "1"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, st = self.get_json(f"/api/status?{q}")
            if st["state"] in ("ready", "error"):
                return
            time.sleep(0.1)
        raise TimeoutError(f"{run}/{worker} did not load in {timeout} s")

    def poll(self, raw_path: str, timeout: float = 120.0, every: float = 0.2) -> tuple[int, Any, int]:
        """GET ``raw_path`` until it stops answering 202 (loading), as the page does:
        the final status, body and how many polls it took."""
        deadline = time.monotonic() + timeout
        polls = 0
        while True:
            status, body = self.get_json(raw_path, timeout=60)
            polls += 1
            if status != 202:
                return status, body, polls
            if time.monotonic() > deadline:
                raise TimeoutError(f"{raw_path} still loading after {timeout} s: {body}")
            time.sleep(every)


class ThreadServer(Client):
    """A dashboard app served by uvicorn in a thread of this process, on a free loopback port.

    The app (and its store) stay reachable from the test, to look at what the
    server holds after real requests."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.app = app
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = int(sock.getsockname()[1])
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the dashboard did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class Server(Client):
    """``kinetolens serve`` in a subprocess on a free loopback port."""

    def __init__(self, logdir: Path, cache_dir: Path) -> None:
        self.logdir = logdir
        self.port = free_port()
        env = {**os.environ, "KINETOLENS_CACHE_DIR": str(cache_dir)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kinetolens.cli.main", "serve", "--logdir", str(logdir), "--port", str(self.port)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if self.get("/api/runs")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"kinetolens serve did not start: {self.proc.stdout.read().decode() if self.proc.stdout else ''}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@contextmanager
def dashboard_server(logdir: Path) -> Iterator[ThreadServer]:
    """The dashboard over ``logdir`` (no cache), served in this process for the block."""
    from kinetolens.views.dashboard.app import create_app

    srv = ThreadServer(create_app(logdir, cache=False))
    try:
        yield srv
    finally:
        srv.stop()


@contextmanager
def chromium_page(width: int, height: int = 900) -> Iterator[Any]:
    """A page of Debian's headless chromium, driven by playwright, for the block."""
    from playwright import sync_api

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()
