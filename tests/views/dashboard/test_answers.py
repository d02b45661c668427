"""The dashboard answers a repeated request with the bytes it already encoded.

A loaded trace never changes, so twenty users opening the same page must
not each rebuild its blocks, sort its tables and encode them: with that,
the operators page took 0.91 s at the 95th percentile under 20 concurrent
loads of a 54 MB trace (bench/dashboard_bench.py), and 35 ms without.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import polars as pl
import pytest

from kinetolens.views.dashboard import app as app_module
from kinetolens.views.dashboard import catalog, create_app, pages
from kinetolens.views.dashboard.state import OncePerKey, TraceStore
from tests.conftest import place, trace_path
from tests.dashboard_helpers import H100, ThreadServer

RUN, WORKER = "h100", "qwen.pt.trace.json.gz"


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[ThreadServer]:
    (tmp_path / RUN).mkdir()
    place(tmp_path / RUN / WORKER, trace_path(H100))
    srv = ThreadServer(create_app(tmp_path))
    srv.wait_ready(RUN, WORKER)
    yield srv
    srv.stop()


def url(path: str, **extra: str) -> str:
    return f"{path}?" + urlencode({"run": RUN, "worker": WORKER, **extra})


def test_the_same_request_gets_the_same_bytes_without_recomputing(
    server: ThreadServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = server.get(url("/api/table/gpus"))
    view = server.get(url("/api/view/operators"))
    assert first[0] == view[0] == 200
    # Swap what pages a table and builds a page: a kept answer calls neither again ...
    monkeypatch.setattr(app_module, "page", lambda frame, **kw: {"replaced": True})
    monkeypatch.setitem(pages.VIEWS, "operators", lambda ctx: [{"type": "text", "text": "replaced"}])
    assert server.get(url("/api/table/gpus")) == first
    assert server.get(url("/api/view/operators")) == view
    # ... while a request that differs in any parameter is answered afresh.
    assert server.get_json(url("/api/table/gpus", sort="name")) == (200, {"replaced": True})
    status, body = server.get_json(url("/api/view/operators", group="module"))
    assert status == 200 and body["blocks"] == [{"type": "text", "text": "replaced"}]


def test_answers_kept_per_trace_are_bounded(server: ThreadServer) -> None:
    for offset in range(200):
        assert server.get(url("/api/table/ops", offset=str(offset), limit="1"))[0] == 200
    store: TraceStore = server.app.state.store
    loaded = store.get(store.lookup(RUN, WORKER))
    assert loaded is not None
    assert 0 < len(loaded._answers) <= 128


def test_a_failed_answer_is_not_kept(server: ThreadServer, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ctx: object) -> pl.DataFrame:
        raise KeyError("no_such_key")

    monkeypatch.setitem(catalog.ALL_SOURCES, "gpus", broken)
    assert server.get_json(url("/api/table/gpus"))[0] == 500
    monkeypatch.undo()
    status, body = server.get_json(url("/api/table/gpus"))
    assert status == 200 and body["rows"], body


def test_once_per_key_computes_once_for_simultaneous_callers() -> None:
    once: OncePerKey = OncePerKey(entries=2)
    calls: list[str] = []
    gate = threading.Event()

    def slow() -> str:
        calls.append("x")
        gate.wait(5)
        return "result"

    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(once.get("k", slow))) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert results == ["result"] * 8 and calls == ["x"]
    for key in ("a", "b", "c"):
        once.get(key, lambda k=key: k)
    assert len(once) == 2  # the least recently used went first
    assert once.get("k", lambda: "recomputed") == "recomputed"
