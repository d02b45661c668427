"""The web dashboard end to end: a real ``kinetolens serve`` on loopback, driven by headless Chromium.

The logdir holds real traces (H100 Qwen, V100 ResNet-50, a 2-rank run, the
HTA diff pair as two runs, two Nsight SQLite exports) and a truncated trace;
one more run is written into it while the server runs.  Each view is opened in the
browser and the numbers it shows are compared with the analysis functions
called directly on the same file; tables are sorted and filtered by
clicking and typing, the memory range is set through the chart's own
relayout (what dragging the range slider does), and the diff compares two
runs.  Screenshots of every view go to ``tests/output/dashboard/``.
Raw HTTP requests check that no run/worker name or static path reaches a
file outside the logdir, and that requests keep answering while a 53 MB
trace loads with no cache.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote, urlencode

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.diff import compare
from kinetolens.analysis.hardware.gpu_metrics import gpu_metrics
from kinetolens.analysis.hardware.kernels import kernel_table
from kinetolens.analysis.memory.usage import memory_events
from kinetolens.analysis.memory.allocations import allocations
from kinetolens.analysis.workload.ops import op_stats
from kinetolens.analysis.summary import attribution, steps_block
from kinetolens.views.perfetto import chrome_trace
from tests.conftest import place, trace_path
from tests.dashboard_helpers import (
    CHROMIUM_ARGS,
    CONTROL,
    FALCON,
    H100,
    LARGE,
    NSYS,
    NSYS_MPI,
    TEST,
    V100,
    Server,
    build_logdir,
)

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(__file__).parents[2] / "output" / "dashboard"
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")

QWEN_W = "qwen.pt.trace.json.gz"
V100_W = "worker0.1623143089861.pt.trace.json.gz"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("dash")
    srv = Server(build_logdir(root / "logdir"), root / "cache")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def page(server: Server) -> Iterator[object]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        yield pg
        browser.close()


def open_view(page, server: Server, run: str, worker: str, view: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{server.url}/#" + urlencode({"run": run, "worker": worker, "view": view}))
    key = f"{run}|{worker}|{view}".replace('"', '\\"')
    page.wait_for_selector(f'#content[data-key="{key}"]', timeout=30000)
    page.wait_for_function("[...document.querySelectorAll('.table-block')].every(b => b.dataset.state === 'ready')",
                           timeout=20000)  # fmt: skip


def shot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def column(page, source: str, col: str) -> list[str]:  # type: ignore[no-untyped-def]
    """A table column's raw values (cell titles) as shown on the page."""
    return page.eval_on_selector(
        f'.table-block[data-source="{source}"]',
        """(b, col) => { const i = [...b.querySelectorAll('thead th')].findIndex(th => th.dataset.col === col);
            return [...b.querySelectorAll('tbody tr')].map(tr => tr.children[i].title); }""",
        col,
    )


def wait_table(page, source: str) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(f"document.querySelector('.table-block[data-source=\"{source}\"]').dataset.state === 'ready'")


def test_h100_views_show_the_analysis_numbers(server: Server, page) -> None:  # type: ignore[no-untyped-def]
    trace = kinetolens.load(trace_path(H100))
    open_view(page, server, "h100", QWEN_W, "overview")
    mean_ms = steps_block(trace).mean_us / 1000.0
    cards = page.inner_text(".cards")
    assert f"{mean_ms:,.3f} ms" in cards
    assert page.locator(".figure .main-svg").count() >= 1  # plotly drew the step breakdown
    shot(page, "overview_h100")

    open_view(page, server, "h100", QWEN_W, "operators")
    expected = op_stats(trace).sort("device_self_us", descending=True)  # self time
    assert column(page, "ops", "name")[:3] == expected["name"][:3].to_list()
    # sort on calls by clicking its header: descending first, then ascending
    page.click('.table-block[data-source="ops"] th[data-col="calls"]')
    wait_table(page, "ops")
    calls = [int(c) for c in column(page, "ops", "calls")]
    assert calls == sorted(calls, reverse=True) and calls[0] == expected["calls"].max()
    page.click('.table-block[data-source="ops"] th[data-col="calls"]')
    wait_table(page, "ops")
    calls = [int(c) for c in column(page, "ops", "calls")]
    assert calls == sorted(calls) and calls[0] == expected["calls"].min()
    # filter by typing: only matching ops remain, the count says how many
    page.fill('.table-block[data-source="ops"] input.filter', "aten::mm")
    page.wait_for_function("document.querySelector('.table-block[data-source=\"ops\"] .count').textContent.includes('filtered')")
    wait_table(page, "ops")
    names = column(page, "ops", "name")
    want = expected.filter(pl.col("name").str.contains("aten::mm", literal=True))["name"].to_list()
    assert sorted(names) == sorted(want) and names
    # click an op: its kernels and call sites appear
    page.click('.table-block[data-source="ops"] tbody tr:has(td[title="aten::mm"])')
    wait_table(page, "op_kernels")
    kernels = column(page, "op_kernels", "kernel")
    assert set(kernels) == set(trace.kernels.filter(pl.col("op") == "aten::mm")["name"].unique().to_list())
    shot(page, "operators_h100")

    for view in ("kernels", "modules", "roofline", "timeline"):
        open_view(page, server, "h100", QWEN_W, view)
        assert page.locator("#content .error").count() == 0, page.inner_text("#content")
        assert page.locator(".figure .main-svg").count() >= 1
        shot(page, f"{view}_h100")
    open_view(page, server, "h100", QWEN_W, "kernels")
    top = trace.kernels.group_by("name").agg(pl.col("dur").sum()).sort("dur", descending=True)
    assert column(page, "kernels", "kernel")[0] == top["name"][0]


def test_memory_range_filters_the_tables(server: Server, page) -> None:  # type: ignore[no-untyped-def]
    open_view(page, server, "h100", QWEN_W, "memory")
    events = memory_events(kinetolens.load(trace_path(H100)))
    origin = int(events["ts"].min())
    whole = page.inner_text('.table-block[data-source="memory_allocations"] .count')
    assert whole.endswith(f"of {allocations(events).height}")
    # what dragging the range slider does: relayout the x axis
    page.evaluate("() => Plotly.relayout(document.querySelector('.figure'), {'xaxis.range': [10, 20]})")
    page.wait_for_function("document.querySelector('#range-start').value !== ''")
    wait_table(page, "memory_allocations")
    page.wait_for_timeout(200)
    wait_table(page, "memory_allocations")
    inside = events.filter((pl.col("ts") >= origin + 10_000_000) & (pl.col("ts") <= origin + 20_000_000))
    want = allocations(inside).height
    assert 0 < want < allocations(events).height
    assert page.inner_text('.table-block[data-source="memory_allocations"] .count').endswith(f"of {want}")
    page.wait_for_function("document.querySelector('img.flow').complete && document.querySelector('img.flow').naturalWidth > 0")
    shot(page, "memory_h100")


def test_v100_overview_and_timeline(server: Server, page) -> None:  # type: ignore[no-untyped-def]
    trace = kinetolens.load(trace_path(V100))
    open_view(page, server, "v100", V100_W, "overview")
    assert f"{steps_block(trace).mean_us / 1000.0:,.3f} ms" in page.inner_text(".cards")
    assert page.locator('.findings .finding').count() >= 1  # recommendations are cards
    shot(page, "overview_v100")
    open_view(page, server, "v100", V100_W, "timeline")
    steps = trace.steps["step"].to_list()
    page.select_option("#step", str(steps[2]))
    page.wait_for_function(f"document.querySelector('.gtitle') && document.querySelector('.gtitle').textContent.includes('step {steps[2]}')")
    shot(page, "timeline_v100")
    # the Perfetto link downloads the whole trace as Chrome trace JSON with our attribution in it
    with page.expect_download() as dl:
        page.click("a[download]")
    exported = json.loads(Path(dl.value.path()).read_text())
    assert len(exported["traceEvents"]) == len(chrome_trace(trace)["traceEvents"]) > trace.kernels.height
    open_view(page, server, "v100", V100_W, "memory")
    # recorded before PyTorch 1.10: no addresses, so no memory-flow picture, and the page says why
    assert page.locator("img.flow").count() == 0 and "no addresses" in page.inner_text("#content")
    shot(page, "memory_v100")


def test_distributed_view_of_two_ranks(server: Server, page) -> None:  # type: ignore[no-untyped-def]
    open_view(page, server, "multi", "rank-0.pt.trace.json.gz", "distributed")
    assert column(page, "dist_steps", "rank") == ["0", "1"]
    # the GPU-time bars take the height their rank count asks for, with no empty band under them
    wanted = page.evaluate("() => document.querySelector('.figure')._figure.layout.height")
    drawn = page.eval_on_selector(".figure", "d => d.getBoundingClientRect().height")
    assert wanted <= 320 and abs(drawn - wanted) <= 2, (wanted, drawn)  # 320: the least a figure gets
    shot(page, "distributed_multi")


def test_diff_view_compares_two_runs(server: Server, page) -> None:  # type: ignore[no-untyped-def]
    open_view(page, server, "control", "worker0.pt.trace.json.gz", "diff")
    page.select_option("#other-run", "test")
    page.click("#diff-go")
    page.wait_for_selector(".cards", timeout=60000)
    wait_table(page, "diff_op")
    summary = compare(kinetolens.load(trace_path(CONTROL)), kinetolens.load(trace_path(TEST))).summary
    assert f"{summary['step_delta_us'] / 1000:+,.3f} ms" in page.inner_text(".cards")
    shot(page, "diff_control_test")


def test_corrupt_trace_shows_its_error_and_the_others_still_work(server: Server, page) -> None:  # type: ignore[no-untyped-def]
    open_view(page, server, "corrupt", "worker0.pt.trace.json", "overview")
    error = page.inner_text("#content .error")
    assert "worker0.pt.trace.json" in error and "\n" not in error.strip()
    shot(page, "corrupt")
    open_view(page, server, "h100", QWEN_W, "overview")
    assert page.locator("#content .error").count() == 0


def test_nsight_sqlite_runs_show_overview_and_kernels(server: Server, page) -> None:  # type: ignore[no-untyped-def]
    trace = kinetolens.load(trace_path(NSYS))  # CloverLeaf on an A100: 1,591 CUDA kernels, no NVTX, no steps
    open_view(page, server, "nsys", "cloverleaf.sqlite", "overview")
    assert page.locator("#content .error").count() == 0, page.inner_text("#content")
    cards = page.inner_text(".cards")
    assert "nsys-sqlite" in cards and "A100-SXM4-80GB" in cards
    assert f"{attribution(trace).kernel_time_us / 1000.0:,.3f} ms" in cards  # 294.405 ms
    metrics = gpu_metrics(trace)
    assert [float(u) for u in column(page, "gpus", "utilization_pct")] == pytest.approx(
        (metrics["utilization"] * 100).to_list(), abs=5e-2)  # fmt: skip  (percent)
    shot(page, "overview_nsys")

    open_view(page, server, "nsys", "cloverleaf.sqlite", "kernels")
    rows = kernel_table(trace).group_by("kernel").agg(calls=pl.len(), total_us=pl.col("dur_us").sum())
    top = rows.sort("total_us", descending=True).head(10)
    assert column(page, "kernels", "kernel")[:10] == top["kernel"].to_list()
    assert [int(c) for c in column(page, "kernels", "calls")[:10]] == top["calls"].to_list()
    assert float(column(page, "kernels", "total_us")[0]) == pytest.approx(top["total_us"][0], abs=1e-3)
    assert page.inner_text('.table-block[data-source="kernels"] .count').endswith(f"of {rows.height}")
    shot(page, "kernels_nsys")

    # what an Nsight export lacks is said, not drawn empty or failed
    for view, missing in (("operators", "Operators are"), ("modules", "Modules are"), ("roofline", "The roofline is"),
                          ("memory", "Memory is")):  # fmt: skip
        open_view(page, server, "nsys", "cloverleaf.sqlite", view)
        content = page.inner_text("#content")
        assert page.locator("#content .error").count() == 0, content
        assert f"{missing} not available for this trace" in content
        shot(page, f"{view}_nsys")
    open_view(page, server, "nsys", "cloverleaf.sqlite", "timeline")
    assert page.locator("#content .error").count() == 0 and page.locator(".figure .main-svg").count() >= 1
    shot(page, "timeline_nsys")

    # nsys 2022.2 with NVTX: its ranges are the operators, and the rank comes from the file name
    mpi = kinetolens.load(trace_path(NSYS_MPI))
    open_view(page, server, "nsys_mpi", "saxpy_rank0.sqlite", "operators")
    expected = op_stats(mpi).sort("device_total_us", descending=True)
    assert column(page, "ops", "name")[0] == expected["name"][0]
    # the top range is saxpy (kernels launched outside every range have a row of their own)
    assert expected.filter(pl.col("name") != "(not under any op)")["name"][0] == "saxpy"
    assert int(column(page, "ops", "calls")[0]) == expected["calls"][0]
    assert page.inner_text('.table-block[data-source="ops"] .count').endswith(f"of {expected.height}")
    shot(page, "operators_nsys_mpi")
    open_view(page, server, "nsys_mpi", "saxpy_rank0.sqlite", "overview")
    cards = page.inner_text(".cards")
    assert "A100-SXM4-40GB" in cards and f"{attribution(mpi).kernel_time_us / 1000.0:,.3f} ms" in cards


def test_a_run_written_while_serving_appears_without_a_restart(server: Server, page) -> None:  # type: ignore[no-untyped-def]
    open_view(page, server, "h100", QWEN_W, "overview")  # the page is up before the run exists
    assert "late" not in server.get_json("/api/runs")[1]["runs"]
    (server.logdir / "late").mkdir()
    place((server.logdir / "late" / "falcon.pt.trace.json.gz"), trace_path(FALCON))
    runs = {r["run"]: [w["id"] for w in r["workers"]] for r in server.get_json("/api/runs")[1]["runs"]}
    assert runs["late"] == ["falcon.pt.trace.json.gz"]
    # the open page picks it up on its own (it lists the runs again every 10 s), no reload
    page.wait_for_function("[...document.querySelectorAll('#run option')].some(o => o.value === 'late')", timeout=20000)
    page.select_option("#run", "late")
    page.wait_for_selector('#content[data-key="late|falcon.pt.trace.json.gz|overview"]', timeout=60000)
    trace = kinetolens.load(trace_path(FALCON))
    cards = page.inner_text(".cards")
    assert f"{steps_block(trace).mean_us / 1000.0:,.3f} ms" in cards  # 7.894 ms, its one profiled step
    assert f"{attribution(trace).kernel_time_us / 1000.0:,.3f} ms" in cards
    assert "H100" in cards and page.locator("#content .error").count() == 0


@pytest.mark.parametrize("path", [
    "/static/../app.py",
    "/static/..%2fapp.py",
    "/static/%2e%2e/%2e%2e/state.py",
    "/static/..%5c..%5capp.py",
    "/api/view/overview?run=..&worker=..%2F..%2F..%2Fetc%2Fpasswd",
    "/api/view/overview?run=h100%2F..%2F..&worker=passwd",
    "/api/table/ops?run=%2Fetc&worker=passwd",
    "/api/status?run=h100&worker=..%2Fv100%2Fworker0.1623143089861.pt.trace.json.gz",
    "/api/memory_flow.svg?run=.&worker=" + quote("/etc/passwd", safe=""),
])  # fmt: skip
def test_no_path_reaches_outside_the_discovered_traces(server: Server, path: str) -> None:
    status, body = server.get(path)
    assert status in (400, 404), (status, body[:200])
    assert b"import " not in body and b"root:" not in body


def test_requests_answer_while_a_large_trace_loads(tmp_path: Path) -> None:
    logdir = build_logdir(tmp_path / "logdir")
    (logdir / "large").mkdir()
    place((logdir / "large" / "worker0.pt.trace.json.gz"), trace_path(LARGE))
    srv = Server(logdir, tmp_path / "empty-cache")  # nothing cached: the load parses 53 MB
    try:
        srv.wait_ready("h100", QWEN_W)
        large = "/api/view/overview?" + urlencode({"run": "large", "worker": "worker0.pt.trace.json.gz"})
        status, first = srv.get_json(large)
        assert status == 202 and first["state"] in ("queued", "loading")
        small = [
            "/api/runs",
            "/api/view/overview?" + urlencode({"run": "h100", "worker": QWEN_W}),
            "/api/table/ops?" + urlencode({"run": "h100", "worker": QWEN_W, "sort": "calls"}),
            large,
        ]

        def answered(path: str) -> tuple[str, int, float]:
            # 60 s: a hang guard only; how fast a loaded machine answers is not the point
            status, _ = srv.get(path, timeout=60)
            return path, status, time.monotonic()

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(answered, small * 12))
        states_seen = {srv.get_json(large)[1].get("state")}
        for path, status, _ in results:
            assert status in (200, 202), (path, status)
            if path != large:
                assert status == 200
        # Answered while the load ran: some request for another trace got its
        # 200 before a later request for the large one still got 202 (loading).
        still_loading = [at for path, status, at in results if path == large and status == 202]
        assert still_loading, "the large trace loaded before any answer: nothing shows requests answer during a load"
        assert any(path != large and at <= max(still_loading) for path, _, at in results)
        srv.wait_ready("large", "worker0.pt.trace.json.gz")
        status, body = srv.get_json(large)
        assert status == 200 and body["state"] == "ready", (states_seen, body)
    finally:
        srv.stop()
