"""What a person sees in the first five minutes: every dashboard page and the HTML report, in Chromium at 1280 px.

Four traces: the HTA CPU-only trace, a torch CPU capture made here (ops,
modules, memory, three steps, no GPU), V100 ResNet-50 and H100 Qwen.  One
dashboard serves them all; each page and each report is screenshotted (to
pytest's tmp dir, never the repo) and checked for what reads wrong at a
glance: an empty chart (a plotly figure none of whose traces hold data), a
page wider than the window, a table with no rows, a utilization shown as
0.903 instead of 90.3%, a number without its unit, a recommendation cut
off in a table cell.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

import kinetolens
from kinetolens.analysis.hardware.gpu_metrics import gpu_metrics
from kinetolens.analysis.advice.recommendations import recommendations_frame
from tests.conftest import place, trace_path
from tests.dashboard_helpers import H100, V100, ThreadServer, chromium_page, dashboard_server

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")

WIDTH = 1280
CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
TRACES = {"cpu_only": CPU_ONLY, "v100": V100, "h100": H100}
VIEWS = ("overview", "operators", "kernels", "modules", "roofline", "memory", "distributed", "timeline")

CAPTURE = """
import sys, torch
from torch.profiler import ProfilerActivity, profile, schedule
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 256)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3), profile_memory=True,
             record_shapes=True, with_stack=True, with_modules=True,
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for _ in range(4):
        model(x).sum().backward(); opt.step(); opt.zero_grad(); prof.step()
"""

#: Per page: figures drawn with no data, the page's overflow, empty tables and what the tables show.
LOOK = """() => {
  const figs = [...document.querySelectorAll('.js-plotly-plot')];
  const has = t => ['x', 'y', 'z', 'values', 'labels', 'ids'].some(k => t[k] && t[k].length > 0);
  return {
    empty_figures: figs.filter(f => !(f.data || []).some(has)).map(f => (f.layout.title || {}).text || '?'),
    plot_heights: figs.map(f => f._fullLayout._size.h),
    scroll_width: document.documentElement.scrollWidth,
    inner_width: window.innerWidth,
    empty_tables: [...document.querySelectorAll('.table-block')]
                    .filter(b => { const s = b.querySelector('.scroll'); return s && !s.hidden && !b.querySelector('tbody tr'); })
                    .map(b => b.dataset.source),
  };
}"""

#: Header cells whose alignment differs from the cells under them (numbers right, text left).
MISALIGNED = """() => [...document.querySelectorAll('table')].flatMap(t => {
  const cells = [...t.querySelectorAll('tbody tr:first-child td')];
  return [...t.querySelectorAll('thead th')].filter((th, i) => cells[i] &&
    getComputedStyle(th).textAlign !== getComputedStyle(cells[i]).textAlign).map(th => th.textContent); })"""


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("glance")
    for run, rel in TRACES.items():
        (root / run).mkdir()
        place((root / run / "w.pt.trace.json.gz"), trace_path(rel))
    (root / "torch_cpu").mkdir()
    subprocess.run([sys.executable, "-c", CAPTURE, str(root / "torch_cpu" / "w.pt.trace.json")], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    return root


@pytest.fixture(scope="module")
def server(logdir: Path) -> Iterator[ThreadServer]:
    with dashboard_server(logdir) as srv:
        yield srv


@pytest.fixture(scope="module")
def page() -> Iterator[object]:
    with chromium_page(WIDTH) as page:
        yield page


def worker(logdir: Path, run: str) -> str:
    return next((logdir / run).iterdir()).name


def open_view(page, server: ThreadServer, run: str, wk: str, view: str) -> dict:  # type: ignore[no-untyped-def]
    page.goto(f"{server.url}/#" + urlencode({"run": run, "worker": wk, "view": view}))
    page.wait_for_selector(f'#content[data-key="{run}|{wk}|{view}"]', timeout=120000)
    page.wait_for_function("[...document.querySelectorAll('.table-block')].every(b => b.dataset.state === 'ready')",
                           timeout=60000)  # fmt: skip
    return page.evaluate(LOOK)


def check_look(look: dict, where: str) -> None:
    # no empty charts, no empty tables, nothing wider than the window at 1280 px
    assert look["empty_figures"] == [], f"{where}: empty charts {look['empty_figures']}"
    assert look["empty_tables"] == [], f"{where}: tables with no rows {look['empty_tables']}"
    assert look["scroll_width"] <= look["inner_width"], f"{where}: page {look['scroll_width']} px wide"
    # charts sized to be read (the report's idle chart plotted 40 px tall)
    assert all(h >= 150 for h in look["plot_heights"]), f"{where}: plot areas {look['plot_heights']}"


@pytest.mark.parametrize("run", ["cpu_only", "torch_cpu", "v100", "h100"])
def test_every_page_reads_at_a_glance(server: ThreadServer, page, logdir: Path, run: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # each dashboard page on each trace, looked at as a person sees it
    wk = worker(logdir, run)
    for view in VIEWS:
        look = open_view(page, server, run, wk, view)
        page.screenshot(path=str(tmp_path / f"{run}_{view}.png"), full_page=True)
        assert page.locator("#content .error").count() == 0, page.inner_text("#content")
        check_look(look, f"{run} {view}")
        # small tables carry no filter box and no pager
        small = page.evaluate("""() => [...document.querySelectorAll('.table-block')]
            .filter(b => b.querySelectorAll('tbody tr').length <= 10)
            .filter(b => [...b.querySelectorAll('input.filter, .pager')].some(e => e.offsetParent !== null))
            .map(b => b.dataset.source)""")
        assert small == [], f"{run} {view}: small tables with a filter box or pager {small}"
        # numeric headers line up with their right-aligned cells
        misaligned = page.evaluate(MISALIGNED)
        assert misaligned == [], f"{run} {view}: headers not aligned with their cells {misaligned}"


def cell_texts(page, source: str, col: str) -> list[str]:  # type: ignore[no-untyped-def]
    return page.eval_on_selector(
        f'.table-block[data-source="{source}"]',
        """(b, col) => { const i = [...b.querySelectorAll('thead th')].findIndex(th => th.dataset.col === col);
            return [...b.querySelectorAll('tbody tr')].map(tr => tr.children[i].textContent); }""",
        col,
    )


def test_gpu_overview_reads_percent_units_and_whole_recommendations(server: ThreadServer, page, logdir: Path) -> None:  # type: ignore[no-untyped-def]
    # utilization as 90.3% (never 0.903), bytes with units, recommendations whole
    from kinetolens.views import units
    trace = kinetolens.load(trace_path(H100))
    metrics = gpu_metrics(trace).row(0, named=True)
    open_view(page, server, "h100", worker(logdir, "h100"), "overview")
    for col, shown in (("utilization", "utilization_pct"), ("sm_efficiency", "sm_efficiency_pct"),
                       ("tensor_core_share", "tensor_core_pct")):  # fmt: skip
        assert cell_texts(page, "gpus", shown) == [units.percent(metrics[col])]
    assert cell_texts(page, "gpus", "utilization_pct") == ["90.3%"]  # regression pin: kinetolens' own number
    assert cell_texts(page, "gpus", "peak_allocated_bytes") == [units.memory(metrics["peak_allocated_bytes"])]
    assert cell_texts(page, "execution_summary", "pct")[0].endswith("%")
    recs = recommendations_frame(trace).sort("saving_ms", descending=True)
    cards = page.locator(".finding")
    assert cards.count() == recs.height > 0
    for i, (evidence, change) in enumerate(recs.select("evidence", "change").iter_rows()):
        card = cards.nth(i)
        assert card.locator(".evidence").inner_text() == evidence
        assert card.locator(".change").inner_text() == f"Change: {change}"
        clipped = card.evaluate("c => [...c.querySelectorAll('p')].some(p => p.scrollWidth > p.clientWidth + 1)")
        assert not clipped

    open_view(page, server, "h100", worker(logdir, "h100"), "kernels")
    flops = cell_texts(page, "kernels", "flops")
    assert any(t.endswith("FLOP") for t in flops), flops[:3]
    moved = cell_texts(page, "kernels", "bytes")
    assert any(t.endswith("B") for t in moved), moved[:3]
    assert page.inner_text('.table-block[data-source="kernels"] th[data-col="total_us"]').startswith("total (ms)")


def test_cpu_only_pages_say_why_in_one_line(server: ThreadServer, page, logdir: Path) -> None:  # type: ignore[no-untyped-def]
    # pages without data say in one line why: no kernel table or chart on a CPU-only trace
    for run in ("cpu_only", "torch_cpu"):
        wk = worker(logdir, run)
        open_view(page, server, run, wk, "kernels")
        assert page.locator(".table-block, .js-plotly-plot").count() == 0
        assert "no GPU kernels" in page.inner_text("#content")
        open_view(page, server, run, wk, "overview")
        assert page.locator('.table-block[data-source="gpus"]').count() == 0
        assert "0.000" not in cell_texts(page, "execution_summary", "time_us")  # no GPU categories of zeros
        assert "no GPU kernels" in page.inner_text("#content")
    # no columns of zeros: a CPU-only trace's operators carry no device time columns
    open_view(page, server, "torch_cpu", worker(logdir, "torch_cpu"), "operators")
    cols = page.eval_on_selector_all('.table-block[data-source="ops"] thead th', "ths => ths.map(t => t.dataset.col)")
    assert "host_total_us" in cols and not [c for c in cols if c.startswith("device_")]
    open_view(page, server, "cpu_only", worker(logdir, "cpu_only"), "modules")
    assert page.locator(".js-plotly-plot").count() == 0 and "nn.Module" in page.inner_text("#content")


@pytest.mark.parametrize("run", ["cpu_only", "torch_cpu", "v100", "h100"])
def test_report_reads_at_a_glance(page, logdir: Path, run: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the HTML report on each trace: no empty charts, charts tall enough to read, no overflow
    from kinetolens.views.report_data import collect
    from kinetolens.views.report_html import write_html

    out = tmp_path / f"report_{run}.html"
    write_html(collect(kinetolens.load(next((logdir / run).iterdir()), cache=False)), out)
    page.goto(out.as_uri())
    page.wait_for_function("[...document.querySelectorAll('.kl-chart')].every(d => d.querySelector('.main-svg'))")
    page.screenshot(path=str(tmp_path / f"report_{run}.png"), full_page=True)
    check_look(page.evaluate(LOOK), f"report {run}")
    assert page.evaluate(MISALIGNED) == [], f"report {run}: headers not aligned with their cells"
    # percent columns read as percent (85.1%, not 85.088)
    bare = page.evaluate("""() => [...document.querySelectorAll('table')].flatMap(t => {
        const cols = [...t.querySelectorAll('thead th')].map(th => /(^|_)pct(_|$)/.test(th.textContent));
        return [...t.querySelectorAll('tbody td')].filter((td, i) => cols[td.cellIndex] &&
          !/%$|^-$/.test(td.textContent)).map(td => td.textContent); })""")
    assert bare == [], f"report {run}: percent cells without a % sign {bare[:5]}"
