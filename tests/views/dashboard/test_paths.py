"""The dashboard serves only the logdir's own files, as they are now, and
only to requests that name it by a host it goes by."""

from __future__ import annotations

import gzip
import os
import shutil
import time
from pathlib import Path
from urllib.parse import urlencode

import kinetolens
from kinetolens.views.dashboard.state import TraceStore
from tests.conftest import trace_path
from tests.dashboard_helpers import dashboard_server

SMALL = "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"
OTHER = "hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz"
#: A hang guard only: these tests check what is answered, not how fast.
HANG_S = 120


def _q(run: str, worker: str, **extra: str) -> str:
    return urlencode({"run": run, "worker": worker, **extra})


def _wait_loaded(store: TraceStore, run: str, worker: str) -> None:
    deadline = time.monotonic() + HANG_S
    while store.get(store.lookup(run, worker)) is None:
        assert store.status(store.lookup(run, worker))["state"] != "error"
        assert time.monotonic() < deadline, "the load hung"
        time.sleep(0.05)


def test_a_link_out_of_the_logdir_is_neither_listed_nor_served(tmp_path: Path) -> None:
    run = tmp_path / "logdir" / "run"
    run.mkdir(parents=True)
    shutil.copy(trace_path(SMALL), run / "inside.pt.trace.json.gz")
    (run / "alias.pt.trace.json.gz").symlink_to(run / "inside.pt.trace.json.gz")  # stays inside: fine
    (run / "outside.pt.trace.json.gz").symlink_to(trace_path(OTHER))
    with dashboard_server(tmp_path / "logdir") as srv:
        status, body = srv.get_json("/api/runs")
        assert status == 200
        listed = sorted(w["id"] for r in body["runs"] for w in r["workers"])
        assert listed == ["alias.pt.trace.json.gz", "inside.pt.trace.json.gz"]
        for path in (f"/api/export/perfetto?{_q('run', 'outside.pt.trace.json.gz')}",
                     f"/api/status?{_q('run', 'outside.pt.trace.json.gz', load='1')}"):  # fmt: skip
            assert srv.get(path)[0] == 404, path
        status, _, _ = srv.poll(f"/api/export/perfetto?{_q('run', 'inside.pt.trace.json.gz')}", timeout=HANG_S)
        assert status == 200
        # A file swapped for a link out of the logdir after it was listed is not served either.
        (run / "inside.pt.trace.json.gz").unlink()
        shutil.copy(trace_path(SMALL), run / "late.pt.trace.json.gz")
        (run / "inside.pt.trace.json.gz").symlink_to(trace_path(OTHER))
        assert srv.get(f"/api/export/perfetto?{_q('run', 'inside.pt.trace.json.gz')}")[0] == 404


def test_host_headers_are_parsed_strictly(tmp_path: Path) -> None:
    run = tmp_path / "logdir" / "run"
    run.mkdir(parents=True)
    shutil.copy(trace_path(SMALL), run / "w.pt.trace.json.gz")
    with dashboard_server(tmp_path / "logdir") as srv:
        port = srv.port
        for good in (f"127.0.0.1:{port}", "localhost", f"LOCALHOST.:{port}", f"[::1]:{port}", "[::1]"):
            assert srv.get("/api/runs", host=good)[0] == 200, good
        for bad in (f"127.0.0.1:{port}@evil.com", "[::1].evil.com", f"[::1]:{port}.evil.com", "localhost:http",
                    "127.0.0.1.evil.com", f"evil.com:{port}", f"localhost:{port}:{port}", "[::1"):  # fmt: skip
            assert srv.get("/api/runs", host=bad)[0] == 403, bad


def test_a_trace_deleted_after_loading_answers_404_and_is_released(tmp_path: Path) -> None:
    run = tmp_path / "logdir" / "run"
    run.mkdir(parents=True)
    shutil.copy(trace_path(SMALL), run / "w.pt.trace.json.gz")
    shutil.copy(trace_path(OTHER), run / "x.pt.trace.json.gz")
    with dashboard_server(tmp_path / "logdir") as srv:
        store: TraceStore = srv.app.state.store
        assert srv.get_json("/api/runs")[0] == 200
        status, _, _ = srv.poll(f"/api/view/overview?{_q('run', 'w.pt.trace.json.gz')}", timeout=HANG_S)
        assert status == 200
        assert any(k[0].endswith("w.pt.trace.json.gz") for k in store._loaded)
        (run / "w.pt.trace.json.gz").unlink()
        # without fetching the run list again
        assert srv.get(f"/api/view/overview?{_q('run', 'w.pt.trace.json.gz')}")[0] == 404
        assert srv.get(f"/api/status?{_q('run', 'w.pt.trace.json.gz')}")[0] == 404
        assert not any(k[0].endswith("w.pt.trace.json.gz") for k in store._loaded), "its memory is released"
        # deleted while its load is queued or under way: nothing of it is kept
        assert srv.get(f"/api/status?{_q('run', 'x.pt.trace.json.gz', load='1')}")[0] == 200
        (run / "x.pt.trace.json.gz").unlink()
        deadline = time.monotonic() + HANG_S
        while any(j.state in ("queued", "loading") for j in store._jobs.values()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert srv.get(f"/api/status?{_q('run', 'x.pt.trace.json.gz')}")[0] == 404
        assert store._loaded == {} or not any(k[0].endswith("x.pt.trace.json.gz") for k in store._loaded)


def test_a_rewrite_keeping_size_and_mtime_is_loaded_again(tmp_path: Path) -> None:
    run = tmp_path / "logdir" / "run"
    run.mkdir(parents=True)
    trace = run / "w.pt.trace.json"
    raw = gzip.decompress(trace_path(SMALL).read_bytes())
    name = next(n for n in kinetolens.load(trace_path(SMALL), cache=False).kernels["name"].unique() if len(n) > 4)
    trace.write_bytes(raw)
    st = trace.stat()
    store = TraceStore(tmp_path / "logdir", cache=False)
    try:
        store.runs()
        _wait_loaded(store, "run", trace.name)
        before = store.get(store.lookup("run", trace.name))
        assert before is not None and name in before.trace.kernels["name"].to_list()
        time.sleep(0.05)  # a later ctime than the first look's
        renamed = "Z" * len(name)
        trace.write_bytes(raw.replace(f'"{name}"'.encode(), f'"{renamed}"'.encode()))
        os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert (trace.stat().st_size, trace.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
        _wait_loaded(store, "run", trace.name)
        after = store.get(store.lookup("run", trace.name))
        assert after is not None and renamed in after.trace.kernels["name"].to_list()
    finally:
        store.close()
