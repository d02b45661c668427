"""The critical path in the report and on the dashboard ("a dashboard view and a report section").

Real traces: V100 ResNet-50 (6 steps, data loading on the path), H100 Qwen
(one step, GPU bound), HTA's alexnet (no profiler step: the whole trace),
HTA's CPU-only trace (a step holding no CPU op: no path at all) and a torch
CPU capture made here (a path through CPU ops only).  The report is
rendered for real; the dashboard is served on loopback and read over HTTP
and in headless Chromium.  Every number on the page is checked against
``kinetolens.analysis.paths.critical_path`` called directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.paths.critical_path import (
    combined,
    critical_path,
    critical_paths,
    per_window,
    step_window,
    step_windows,
    summarize,
    top_items,
    whole_window,
)
from kinetolens.analysis.paths.sampling import SAMPLE_STEPS, sample
from kinetolens.model.steps import without_incomplete_steps
from kinetolens.views import units
from kinetolens.views.critical_path_section import CriticalPathSection, critical_path_section
from kinetolens.views.report_data import collect
from kinetolens.views.report_html import render_html
from kinetolens.views.report_md import render_md
from tests.conftest import place, trace_path
from tests.cpu_capture import capture_small_mlp
from tests.dashboard_helpers import H100, V100, ThreadServer, chromium_page, dashboard_server

ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def v100() -> kinetolens.Trace:
    return kinetolens.load(trace_path(V100))


@pytest.fixture(scope="module")
def torch_cpu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace, _ = capture_small_mlp(tmp_path_factory.mktemp("cp_cpu"))
    return trace


def _section_html(page: str) -> str:
    """The report's critical-path section: from its heading to the next section's."""
    start = page.index('<h2 id="critical-path">')
    return page[start : page.index("<h2 ", start + 10)]


# -- the report ------------------------------------------------------------------


def test_report_section_shows_each_steps_length_split_and_top_items(v100: kinetolens.Trace) -> None:
    # per step its length, the bound-by split in percent, the top ops/kernels/sources, a verdict
    data = collect(v100)
    html = _section_html(render_html(data))
    whole = without_incomplete_steps(v100)
    paths = critical_paths(whole, step_windows(whole))
    assert [cp.window.step for cp in paths] == [5, 6, 7, 8, 9, 10]
    for row in per_window(paths).iter_rows(named=True):  # each step's length, in the column's ms
        assert f"<td class=\"num\">{row['length_us'] / 1000:,.3f}</td>" in html
    path, length = combined(paths)
    summary = summarize(path, length)
    for share in summary["pct"]:  # the split, as percentages (38.2%, never 0.382 or 38.199)
        assert f">{units.percent(share / 100)}<" in html
    top = summary.sort("us", descending=True).row(0, named=True)
    # regression pin: kinetolens' own result on this trace, each step's path cut to the model's step window
    # (over the host ranges it read data loading 38.2% of 181 ms)
    assert top["bound_by"] == "gpu_compute"
    verdict = re.search(r'<p class="kl-verdict"><b>(.*?)</b></p>', html)
    assert verdict is not None
    assert verdict.group(1).startswith(f"Bound by GPU compute: {units.percent(top['pct'] / 100)} of a ")
    assert "mean of 6 steps" in verdict.group(1)
    # the largest kernel and source line on the path, with their share
    kernel = top_items(path, "name", length, 1, ("gpu_compute", "gpu_memory", "communication")).row(0, named=True)
    assert "dgrad_engine" in kernel["name"] and f">{units.percent(kernel['pct'] / 100)}<" in html
    assert ">cudnn::dgrad_engine<float, 512, 6, 5, 3, 3, 3></td>" in html.replace("&lt;", "<").replace("&gt;", ">")  # short name
    source = top_items(path, "source", length, 1).row(0, named=True)
    assert f">{source['source']}<" in html
    # the stacked bar: one bar per step, one trace per bound with time on the path
    assert html.count('ms (%{customdata})') == summary.filter(pl.col("us") > 0).height
    # no modules in this trace: one line, not an empty table
    assert "No module on the path: the ops carry no nn.Module paths" in html


def test_report_markdown_section_matches_the_html_numbers(v100: kinetolens.Trace) -> None:
    # the markdown report carries the same section
    md = render_md(collect(v100))
    part = md[md.index("## Critical path") : md.index("\n## ", md.index("## Critical path") + 5)]
    assert part.count("\n| 5 |") == 1 and "| 10 |" in part
    assert re.search(r"\| GPU compute \| +[\d,.]+ \| +38\.1% \|", part), part[:2000]
    assert "**Bound by GPU compute: 38.1% of a 171 ms critical path" in part  # regression pin (paths cut to the steps)


def test_report_on_a_trace_without_steps_covers_the_whole_trace_and_says_so() -> None:
    # a trace with no steps uses the whole window, said in one line
    trace = kinetolens.load(trace_path(ALEXNET))
    assert trace.steps.height == 0
    html = _section_html(render_html(collect(trace)))
    assert "The trace has no profiler steps: the path covers the whole trace." in html
    whole = critical_path(trace, whole_window(trace))
    assert f"<td class=\"num\">{whole.length_us / 1e6:,.3f}</td>" in html  # seconds: a 43 s window


def test_report_on_a_long_trace_traces_a_spread_sample_of_steps_and_says_which(many_steps: Path) -> None:
    # more complete steps than SAMPLE_STEPS: the paths of SAMPLE_STEPS steps spread over
    # the trace (first and last included), the same as critical_paths on those windows
    trace = kinetolens.load(many_steps)
    whole = without_incomplete_steps(trace)
    windows = step_windows(whole)
    assert len(windows) > SAMPLE_STEPS
    taken = [windows[i] for i in sample(len(windows), SAMPLE_STEPS)]
    section = critical_path_section(trace)
    assert isinstance(section, CriticalPathSection)
    assert [cp.window.step for cp in section.paths] == [w.step for w in taken]
    assert taken[0].step == windows[0].step and taken[-1].step == windows[-1].step
    assert section.of == len(windows)
    assert section.length_us == pytest.approx(sum(cp.length_us for cp in critical_paths(whole, taken)))
    steps = ", ".join(str(w.step) for w in taken)
    note = f"Traced on {SAMPLE_STEPS} of the {len(windows)} complete steps, spread over the trace (steps {steps})"
    assert section.notes[0].startswith(note)
    html = _section_html(render_html(collect(trace)))
    assert note in html and f"mean of {SAMPLE_STEPS} steps" in html
    # the per-step table: one row per sampled step, in time order, and no other step
    assert re.findall(r'<tr><td class="name">(\d+)</td>', html) == [str(w.step) for w in taken]
    # a step asked for is traced alone, whatever the sample
    one = critical_path_section(trace, windows[1].step)
    assert isinstance(one, CriticalPathSection)
    assert [cp.window.step for cp in one.paths] == [windows[1].step] and one.notes == [] and one.of == 1


def test_report_without_a_path_says_why_in_one_line() -> None:
    # a step holding no CPU op has no path: one line, no heading, no chart
    html = render_html(collect(kinetolens.load(trace_path(CPU_ONLY))))
    assert '<h2 id="critical-path">' not in html
    line = re.search(r'<p class="kl-left-out" id="critical-path">(.*?)</p>', html)
    assert line is not None
    assert line.group(1) == "Critical path left out: the trace has no CPU ops or runtime calls in ProfilerStep#551."
    assert "kl-chart-critical-path" not in html


def test_report_on_a_cpu_only_capture_has_a_path_and_no_kernel_table(torch_cpu: Path) -> None:
    # a CPU-only trace still has a path; its kernels table is one line
    trace = kinetolens.load(torch_cpu)
    html = _section_html(render_html(collect(trace)))
    assert "A CPU-only trace: the path runs through CPU ops and runtime calls only." in html
    assert "No GPU kernel on the path: a CPU-only trace." in html
    assert "Kernels on the path" not in html
    paths = critical_paths(without_incomplete_steps(trace), step_windows(without_incomplete_steps(trace)))
    assert len(paths) == 2 and all(cp.length_us > 0 for cp in paths)
    assert "<td class=\"name\">CPU ops</td>" in html and "Modules on the path" in html


# -- the dashboard over HTTP --------------------------------------------------------


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory, torch_cpu: Path) -> Path:
    root = tmp_path_factory.mktemp("cp_logdir")
    for run, path in {"v100": trace_path(V100), "h100": trace_path(H100), "cpu_only": trace_path(CPU_ONLY), "torch_cpu": torch_cpu}.items():
        (root / run).mkdir()
        suffix = ".json.gz" if path.name.endswith(".gz") else ".json"
        place((root / run / f"w.pt.trace{suffix}"), path)
    return root


@pytest.fixture(scope="module")
def server(logdir: Path) -> Iterator[ThreadServer]:
    with dashboard_server(logdir) as srv:
        yield srv


def _worker(logdir: Path, run: str) -> str:
    return next((logdir / run).iterdir()).name


def _rows(server: ThreadServer, logdir: Path, run: str, source: str, **extra: str) -> dict:
    q = urlencode({"run": run, "worker": _worker(logdir, run), "limit": 100, **extra})
    status, body, _ = server.poll(f"/api/table/{source}?{q}")
    assert status == 200, body
    return body


def test_dashboard_view_and_tables_match_the_analysis(server: ThreadServer, logdir: Path, v100: kinetolens.Trace) -> None:
    # the dashboard page reads the analysis' numbers, per step and for one chosen step
    q = urlencode({"run": "v100", "worker": _worker(logdir, "v100")})
    status, body, _ = server.poll(f"/api/view/critical_path?{q}")
    assert status == 200 and body["state"] == "ready", body
    kinds = [b["type"] for b in body["blocks"]]
    assert kinds[:2] == ["text", "cards"] and "figure" in kinds
    assert body["blocks"][0]["kind"] == "verdict" and body["blocks"][0]["text"].startswith("Bound by GPU compute: 38.1%")
    whole = without_incomplete_steps(v100)
    expected = per_window(critical_paths(whole, step_windows(whole)))
    page = _rows(server, logdir, "v100", "critical_path_steps")
    got = [(r[0], r[1]) for r in page["rows"]]
    assert got == [(str(s), round(length, 3)) for s, length in expected.select("step", "length_us").iter_rows()]
    assert all(t[-1].endswith("%") for t in page["text"])  # shares read 37.9%, not 37.885
    # one chosen step: that step's own path
    one = critical_path(v100, step_window(v100, 7))
    status, body, _ = server.poll(f"/api/view/critical_path?{q}&step=7")
    assert status == 200 and body["blocks"][1]["items"][0] == ["critical path", units.duration(one.length_us)]
    assert body["blocks"][1]["items"][2] == ["step", "7"]
    summary = _rows(server, logdir, "v100", "critical_path_summary", step="7")
    assert [r[1] for r in summary["rows"]] == [round(u, 3) for u in one.summary["us"]]


def test_dashboard_says_in_one_line_when_there_is_no_path_or_no_kernel(server: ThreadServer, logdir: Path) -> None:
    # no empty chart or table: one line instead
    q = urlencode({"run": "cpu_only", "worker": _worker(logdir, "cpu_only")})
    status, body, _ = server.poll(f"/api/view/critical_path?{q}")
    assert status == 200
    assert body["blocks"] == [{"type": "text", "kind": "warn",
                               "text": "Critical path left out: the trace has no CPU ops or runtime calls in ProfilerStep#551."}]  # fmt: skip
    q = urlencode({"run": "torch_cpu", "worker": _worker(logdir, "torch_cpu")})
    status, body, _ = server.poll(f"/api/view/critical_path?{q}")
    texts = [b["text"] for b in body["blocks"] if b["type"] == "text"]
    assert "No GPU kernel on the path: a CPU-only trace." in texts
    assert "critical_path_kernels" not in [b.get("source") for b in body["blocks"]]


# -- in the browser ---------------------------------------------------------------------

LOOK = """() => {
  const figs = [...document.querySelectorAll('.js-plotly-plot')];
  const has = t => ['x', 'y'].some(k => t[k] && t[k].length > 0);
  return {
    figures: figs.length,
    empty_figures: figs.filter(f => !(f.data || []).some(has)).length,
    bars: figs.map(f => (f.data || []).map(t => t.y.length)),
    scroll_width: document.documentElement.scrollWidth,
    inner_width: window.innerWidth,
    empty_tables: [...document.querySelectorAll('.table-block')]
      .filter(b => { const s = b.querySelector('.scroll'); return s && !s.hidden && !b.querySelector('tbody tr'); }).length,
    shares: [...document.querySelectorAll('.table-block th[data-col="share_pct"]')].map(th => {
      const i = [...th.parentNode.children].indexOf(th);
      return [...th.closest('table').querySelectorAll('tbody tr')].map(tr => tr.children[i].textContent); }).flat(),
    verdict: (document.querySelector('.note.verdict') || {}).textContent || null,
  };
}"""


@pytest.fixture(scope="module")
def page() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium")
    pytest.importorskip("playwright.sync_api")
    with chromium_page(1280) as page:
        yield page


@pytest.mark.parametrize(("run", "steps"), [("v100", 6), ("h100", 1), ("torch_cpu", 2), ("cpu_only", 0)])
def test_critical_path_page_reads_in_chromium(server: ThreadServer, logdir: Path, page, tmp_path: Path, run: str, steps: int) -> None:  # type: ignore[no-untyped-def]
    # the page as a person sees it: a bar per step, tables filled, shares in %, nothing too wide
    wk = _worker(logdir, run)
    page.goto(f"{server.url}/#" + urlencode({"run": run, "worker": wk, "view": "critical_path"}))
    page.wait_for_selector(f'#content[data-key="{run}|{wk}|critical_path"]', timeout=120000)
    page.wait_for_function("[...document.querySelectorAll('.table-block')].every(b => b.dataset.state === 'ready')", timeout=60000)
    look = page.evaluate(LOOK)
    page.screenshot(path=str(tmp_path / f"critical_path_{run}.png"), full_page=True)
    assert page.locator("#views li.active").inner_text() == "Critical path"
    content = page.inner_text("#content")
    assert look["scroll_width"] <= look["inner_width"]
    assert look["empty_figures"] == 0 and look["empty_tables"] == 0
    if steps == 0:
        assert look["figures"] == 0 and content.strip().startswith("Critical path left out:")
        return
    assert look["figures"] == 1 and all(n == steps for n in look["bars"][0])  # one bar per step for each bound
    assert look["shares"] and all(re.fullmatch(r"\d+\.\d%", s) for s in look["shares"])
    assert look["verdict"] and look["verdict"].startswith("Bound by ")


def test_per_step_table_names_the_window_the_path_does_not_reach() -> None:
    # HTA's sampled DLRM rank 0: each step's path starts ~2.3 ms into its window and ends
    # 52-55 ms before the window's work does; the per-step table shows both, and they add up.
    from kinetolens.views.critical_path_section import critical_path_section

    section = critical_path_section(kinetolens.load(trace_path("hta/trace_filter/sampled_rank-0.json.gz")))
    assert not isinstance(section, str)
    steps = section.steps
    assert steps.select("step", "before_path_us", "after_path_us", "window_us").rows() == [
        ("551", 2_305.0, 51_892.0, 607_312.0),
        ("552", 2_292.0, 55_382.0, 622_928.0),
    ]
    for row in steps.iter_rows(named=True):
        assert row["before_path_us"] + row["span_us"] + row["after_path_us"] == pytest.approx(row["window_us"])
