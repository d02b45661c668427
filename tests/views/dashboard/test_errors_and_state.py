"""The dashboard's trust points, over real HTTP on loopback.

Runs of 8, 16 and 64 generated ranks (``bench/gen_ranks.py``, from a real
rank's trace) against the in-memory limit of 6 loaded traces; Host headers a
DNS-rebinding page would send; the per-trace result memo under a memory
range dragged to many places; and an analysis that fails inside a request.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import polars as pl
import pytest

from kinetolens.analysis.ranks.distributed import step_times
from kinetolens.analysis.gputime.idle import temporal_breakdown
from kinetolens.runs import LocalExecutor, summarize_run
from kinetolens.views.dashboard import create_app
from kinetolens.views.dashboard.state import TraceStore
from tests.conftest import place, trace_path
from tests.dashboard_helpers import H100, ThreadServer

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from gen_ranks import generate

SOURCE = "hta/trace_filter/sampled_rank-0.json.gz"
STRAGGLER = 3


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ranks") / "logdir"
    for n in (8, 16, 64):
        generate(trace_path(SOURCE), root / f"r{n}", n, STRAGGLER, keep_every=64, seed=n)
    (root / "h100").mkdir()
    place((root / "h100" / "qwen.pt.trace.json.gz"), trace_path(H100))
    return root


@pytest.fixture(scope="module")
def server(logdir: Path) -> Iterator[ThreadServer]:
    srv = ThreadServer(create_app(logdir))  # the default in-memory limit: 6 traces
    yield srv
    srv.stop()


def view(run: str, name: str = "distributed", **extra: str) -> str:
    return f"/api/view/{name}?" + urlencode({"run": run, "worker": "rank-0.json.gz", "ranks": "all", **extra})


def rows(srv: ThreadServer, source: str, run: str, limit: int = 500) -> pl.DataFrame:
    q = urlencode({"run": run, "worker": "rank-0.json.gz", "ranks": "all", "sort": "rank", "desc": "0",
                   "limit": limit})  # fmt: skip
    status, page, _ = srv.poll(f"/api/table/{source}?{q}")
    assert status == 200, page
    return pl.DataFrame([dict(zip([c["name"] for c in page["columns"]], r, strict=True)) for r in page["rows"]])


# more ranks than loaded traces kept used to requeue the evicted ranks forever
@pytest.mark.parametrize("ranks", [8, 16, 64])
def test_distributed_view_finishes_with_more_ranks_than_kept_traces(
    server: ThreadServer, logdir: Path, ranks: int
) -> None:
    store: TraceStore = server.app.state.store
    assert store.keep == 6 < ranks
    status, body, polls = server.poll(view(f"r{ranks}"), timeout=90)
    assert status == 200 and body["state"] == "ready", body
    assert polls < 200  # each rank loaded about once, not in a loop
    # the numbers are the same as the command line's (every rank summarized at once)
    want = step_times(summarize_run(logdir / f"r{ranks}", LocalExecutor(workers=1), cache=False))
    got = rows(server, "dist_steps", f"r{ranks}")
    assert got["rank"].to_list() == list(range(ranks))
    assert got.columns == want.columns
    for col in want.columns:  # the dashboard shows floats rounded to 3 places
        assert got[col].to_list() == pytest.approx(want[col].to_list(), abs=1e-3), col
    assert rows(server, "dist_overlap", f"r{ranks}")["rank"].to_list() == list(range(ranks))
    stragglers = rows(server, "dist_stragglers", f"r{ranks}")
    assert stragglers.filter(pl.col("straggler"))["rank"].to_list() == [STRAGGLER]
    # and the whole traces were not all kept: per-rank summaries are
    assert len(store._loaded) <= store.keep


def test_distributed_bars_match_each_ranks_own_breakdown(server: ThreadServer, logdir: Path) -> None:
    # the figure comes from the kept per-rank summaries, one bar per rank
    import kinetolens

    status, body, _ = server.poll(view("r8"), timeout=90)
    assert status == 200
    fig = next(b for b in body["blocks"] if b["type"] == "figure")["figure"]
    bars = {t["name"]: t for t in fig["data"]}
    assert bars["idle"]["y"] == [f"rank {r}" for r in range(8)]
    rank5 = temporal_breakdown(kinetolens.load(logdir / "r8" / "rank-5.json.gz", cache=False)).row(0, named=True)
    for part in ("compute", "non_compute", "idle"):
        assert bars[part]["x"][5] == pytest.approx(rank5[f"{part}_pct"])
        assert bars[part]["customdata"][5] == pytest.approx(rank5[f"{part}_us"])


# DNS rebinding: a page of another site that resolves its name to 127.0.0.1
# sends its own name in the Host header; only loopback names (and --host) are answered
@pytest.mark.parametrize(("host", "status"), [
    ("127.0.0.1:{port}", 200),
    ("localhost:{port}", 200),
    ("LOCALHOST.:{port}", 200),
    ("[::1]:{port}", 200),
    ("127.0.0.2", 200),
    ("evil.example:{port}", 403),
    ("localhost.evil.example:{port}", 403),
    ("127.0.0.1.nip.io:{port}", 403),
    ("[::ffff:10.0.0.1]:{port}", 403),
])  # fmt: skip
def test_only_loopback_host_headers_are_answered(server: ThreadServer, host: str, status: int) -> None:
    for path in ("/", "/api/runs", "/static/dashboard.js", view("r8")):
        got, body = server.get(path, host=host.format(port=server.port))
        assert (got == 403) == (status == 403), (path, got)
        if got == 403:
            assert b"r8" not in body and b"not this dashboard's" in body


def test_host_given_to_serve_is_answered_too(logdir: Path) -> None:
    # `serve --host NAME` means the dashboard goes by NAME as well
    srv = ThreadServer(create_app(logdir, host="dash.internal"))
    try:
        assert srv.get("/api/runs", host=f"dash.internal:{srv.port}")[0] == 200
        assert srv.get("/api/runs", host=f"localhost:{srv.port}")[0] == 200
        assert srv.get("/api/runs", host=f"evil.example:{srv.port}")[0] == 403
    finally:
        srv.stop()
    wide = ThreadServer(create_app(logdir, host="0.0.0.0"))  # bound to every address: open to any name
    try:
        assert wide.get("/api/runs", host="anything.example")[0] == 200
    finally:
        wide.stop()


def test_memo_per_trace_is_bounded(server: ThreadServer) -> None:
    # every memory range dragged to used to be kept forever, per table
    server.wait_ready("h100", "qwen.pt.trace.json.gz")
    for i in range(150):
        q = urlencode({"run": "h100", "worker": "qwen.pt.trace.json.gz", "start_ms": f"{i * 0.01:.2f}"})
        assert server.get(f"/api/table/memory_allocations?{q}")[0] == 200
    store: TraceStore = server.app.state.store
    loaded = store.get(store.lookup("h100", "qwen.pt.trace.json.gz"))
    assert loaded is not None
    assert 0 < len(loaded._memo) <= 64
    # what is still asked for stays: the whole-trace table is computed once more at most
    q = urlencode({"run": "h100", "worker": "qwen.pt.trace.json.gz", "start_ms": "1.49"})
    assert server.get(f"/api/table/memory_allocations?{q}")[0] == 200


def test_an_analysis_failing_is_a_logged_500_not_a_bad_parameter(
    server: ThreadServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a KeyError (or ValueError) raised inside an analysis used to answer
    # 400 "bad parameter" and log nothing; it is the server's fault
    from kinetolens.views.dashboard import catalog, sources

    def buggy(ctx: sources.Ctx) -> pl.DataFrame:  # an analysis with a bug: a key the metadata lacks
        return pl.DataFrame({"x": [ctx.trace.metadata["no_such_key"]]})

    def buggy_value(ctx: sources.Ctx) -> pl.DataFrame:
        return pl.DataFrame({"x": [int(ctx.trace.format)]})

    monkeypatch.setitem(catalog.ALL_SOURCES, "gpus", buggy)
    monkeypatch.setitem(catalog.ALL_SOURCES, "recommendations", buggy_value)
    server.wait_ready("h100", "qwen.pt.trace.json.gz")
    for source, kind in (("gpus", "KeyError"), ("recommendations", "ValueError")):
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="kinetolens.dashboard"):
            q = urlencode({"run": "h100", "worker": "qwen.pt.trace.json.gz"})
            status, body = server.get_json(f"/api/table/{source}?{q}")
        assert status == 500, body
        assert body["error"].startswith(f"internal error: {kind}") and "\n" not in body["error"]
        assert any(r.exc_info and r.exc_info[0].__name__ == kind for r in caplog.records)
    # a parameter the view refuses is still the request's fault, and says which
    q = urlencode({"run": "h100", "worker": "qwen.pt.trace.json.gz", "group": "nope"})
    assert server.get_json(f"/api/table/ops?{q}") == (400, {
        "error": "group must be one of op, op+shape, module, source, not 'nope'"})  # fmt: skip
    for bad in ({"limit": "ten"}, {"start_ms": "inf"}, {"start_ms": "nan"}, {"step": "x"}):
        q = urlencode({"run": "h100", "worker": "qwen.pt.trace.json.gz", **bad})
        assert server.get_json(f"/api/table/memory_ops?{q}")[0] == 400, bad


def test_a_failing_rank_analysis_is_a_logged_500(logdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    # the same for the per-rank summaries the Distributed view keeps
    app = create_app(logdir)
    store: TraceStore = app.state.store
    store._digest_of = lambda trace, rank: trace.metadata["distributedInfo"]["no_such_key"]
    srv = ThreadServer(app)
    try:
        with caplog.at_level(logging.ERROR, logger="kinetolens.dashboard"):
            status, body, _ = srv.poll(view("r8"), timeout=60)
        assert status == 500 and body["error"].startswith("internal error: KeyError"), body
        assert any(r.exc_info and r.exc_info[0] is KeyError for r in caplog.records)
    finally:
        srv.stop()


def test_a_diff_always_has_room_for_its_two_traces(logdir: Path) -> None:
    # with one trace kept, loading either side
    # of a diff evicted the other, and the Diff page waited forever
    with pytest.raises(ValueError, match="at least 2"):
        create_app(logdir, keep=1)
    srv = ThreadServer(create_app(logdir, keep=2))
    try:
        q = urlencode({"run": "r8", "worker": "rank-0.json.gz", "other_run": "r16", "other_worker": "rank-3.json.gz"})
        status, body, _ = srv.poll(f"/api/view/diff?{q}", timeout=60)
        assert status == 200 and body["state"] == "ready"
    finally:
        srv.stop()


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium")
def test_distributed_page_of_8_ranks_finishes_in_the_browser(server: ThreadServer) -> None:
    # the page itself, as a user opens it (8 ranks, 6 traces kept)
    playwright = pytest.importorskip("playwright.sync_api")
    from tests.dashboard_helpers import CHROMIUM_ARGS

    shots = Path(__file__).parents[2] / "output" / "dashboard"
    shots.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{server.url}/#" + urlencode({"run": "r8", "worker": "rank-0.json.gz", "view": "distributed"}))
            page.wait_for_selector('#content[data-key="r8|rank-0.json.gz|distributed"]', timeout=60000)
            page.wait_for_function(
                "[...document.querySelectorAll('.table-block')].every(b => b.dataset.state === 'ready')", timeout=30000)
            assert page.locator("#content .error").count() == 0, page.inner_text("#content")
            ranks = page.eval_on_selector(
                '.table-block[data-source="dist_steps"]',
                "b => [...b.querySelectorAll('tbody tr')].map(tr => tr.children[0].title)")
            assert ranks == [str(r) for r in range(8)]
            straggler = page.eval_on_selector(
                '.table-block[data-source="dist_stragglers"]',
                """b => { const i = [...b.querySelectorAll('thead th')].findIndex(th => th.dataset.col === 'straggler');
                          const j = [...b.querySelectorAll('thead th')].findIndex(th => th.dataset.col === 'rank');
                          return [...b.querySelectorAll('tbody tr')].filter(tr => tr.children[i].title === 'true')
                                 .map(tr => tr.children[j].title); }""")
            assert straggler == [str(STRAGGLER)]
            page.screenshot(path=str(shots / "distributed_8_ranks.png"), full_page=True)
        finally:
            browser.close()


def test_ranks_named_only_by_their_files_keep_their_ranks(tmp_path: Path) -> None:
    # traces without distributedInfo take their rank from the file name;
    # the one shown in the left panel (loaded first, for itself) must not fall back to rank 0
    import gzip
    import json

    doc = json.loads(gzip.decompress(trace_path(SOURCE).read_bytes()))
    doc.pop("distributedInfo", None)
    run = tmp_path / "logdir" / "noinfo"
    run.mkdir(parents=True)
    for r in range(8):
        (run / f"rank-{r}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    srv = ThreadServer(create_app(tmp_path / "logdir", cache=False))
    try:
        q = {"run": "noinfo", "worker": "rank-5.json.gz", "ranks": "all"}
        status, body, _ = srv.poll("/api/view/distributed?" + urlencode(q), timeout=90)
        assert status == 200, body
        status, page, _ = srv.poll("/api/table/dist_steps?" + urlencode({**q, "sort": "rank", "desc": "0"}))
        assert [r[0] for r in page["rows"]] == list(range(8))
        # the same ranks in the overlap table and on the GPU-time bars, not "rank None" eight times
        status, page, _ = srv.poll("/api/table/dist_overlap?" + urlencode({**q, "sort": "rank", "desc": "0"}))
        assert [r[0] for r in page["rows"]] == list(range(8))
        fig = next(b for b in body["blocks"] if b["type"] == "figure")["figure"]
        assert fig["data"][0]["y"] == [f"rank {r}" for r in range(8)]
    finally:
        srv.stop()


def test_two_traces_of_one_rank_are_said_not_merged(tmp_path: Path) -> None:
    # `kinetolens dist` refuses two files of the same rank; the Distributed
    # view used to fold them into one rank's numbers silently
    run = tmp_path / "logdir" / "twice"
    run.mkdir(parents=True)
    for name in ("first.json.gz", "second.json.gz"):  # both say rank 0 in their distributedInfo
        place((run / name), trace_path(SOURCE))
    srv = ThreadServer(create_app(tmp_path / "logdir", cache=False))
    try:
        q = {"run": "twice", "worker": "first.json.gz", "ranks": "all"}
        status, body, _ = srv.poll("/api/view/distributed?" + urlencode(q), timeout=60)
        assert status == 200
        assert [b["type"] for b in body["blocks"]] == ["text"]
        assert "rank 0 appears twice (first.json.gz, second.json.gz)" in body["blocks"][0]["text"]
    finally:
        srv.stop()


def test_runs_removed_while_serving_are_one_line_answers(tmp_path: Path) -> None:
    # Errors are one line of JSON, never a bare 500: a run directory
    # removed, then the whole logdir, while the dashboard serves it
    import shutil

    logdir = tmp_path / "logdir"
    generate(trace_path(SOURCE), logdir / "keep", 2, None, keep_every=64, seed=1)
    generate(trace_path(SOURCE), logdir / "gone", 2, None, keep_every=64, seed=2)
    srv = ThreadServer(create_app(logdir, cache=False))
    try:
        assert sorted(r["run"] for r in srv.get_json("/api/runs")[1]["runs"]) == ["gone", "keep"]
        shutil.rmtree(logdir / "gone")
        assert [r["run"] for r in srv.get_json("/api/runs")[1]["runs"]] == ["keep"]
        assert srv.get_json(view("gone"))[0] == 404
        shutil.rmtree(logdir)
        status, body = srv.get_json("/api/runs")
        assert status == 404 and body == {"error": f"{logdir}: no such directory"}
        assert srv.get_json(view("keep")) == (404, body)
    finally:
        srv.stop()


def test_empty_memory_range_and_unknown_step_are_said(server: ThreadServer) -> None:
    # the memory-flow picture of a range dragged past the last
    # event was a 500 (IndexError in the server); a step the trace lacks gave empty tables
    # (0 calls, 0 us) on every view but the timeline, which said "no step"
    server.wait_ready("h100", "qwen.pt.trace.json.gz")
    base = {"run": "h100", "worker": "qwen.pt.trace.json.gz"}
    status, body = server.get("/api/memory_flow.svg?" + urlencode({**base, "start_ms": "100000"}))
    assert status == 200 and body.startswith(b"<svg") and b"No memory events in this range." in body
    status, body = server.get("/api/memory_flow.svg?" + urlencode(base))
    assert status == 200 and b"No memory events" not in body  # the whole trace: the picture
    for path in ("/api/view/operators", "/api/view/kernels", "/api/view/timeline", "/api/table/ops",
                 "/api/table/kernels", "/api/table/modules"):  # fmt: skip
        assert server.get_json(f"{path}?" + urlencode({**base, "step": "99999"})) == (
            400, {"error": "no step 99999 in this trace"}), path
    step = server.get_json("/api/view/operators?" + urlencode(base))[1]["steps"][0]
    assert server.get_json("/api/table/ops?" + urlencode({**base, "step": step}))[0] == 200
