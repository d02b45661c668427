"""The critical path across ranks in the report (a section) and on the dashboard (a view).

Real runs: HTA's two ranks (A100s, NCCL), the real gloo run whose rank 1
sleeps in its data loading (the session's ``slow_loader_2``, shared with
test_cross_rank_critical_path.py) and a generated run of 64 ranks with a
planted straggler.  Reports are rendered by the real CLI; the dashboard is
served on loopback and read over HTTP and in headless Chromium.  Numbers on
the page are checked against :mod:`kinetolens.analysis.paths.cross_rank_path`
called directly.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import polars as pl
import pytest
from markupsafe import escape

import kinetolens
from kinetolens.analysis.paths.critical_path import summarize
from kinetolens.analysis.paths.cross_rank_path import by_rank, combined
from kinetolens.cli.main import main
from kinetolens.runs.graphs import run_graphs, run_paths, run_summaries_and_graphs
from kinetolens.views import units
from kinetolens.views.cross_rank_path_section import cross_rank_section
from kinetolens.views.report_data import collect
from kinetolens.views.report_md import render_md
from tests.conftest import place, trace_path
from tests.dashboard_helpers import ThreadServer, chromium_page, dashboard_server
from tests.distributed.runs import DELAY_MS, SLOW_RANK, WHOLE_STEPS, DistributedRun, slow_loader_2  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gen_ranks import PLANTED_KERNEL, generate

HTA_RUN = "hta/trace_filter"
CHROMIUM = Path("/usr/bin/chromium")
WIDTH = 1280


def _subsection(page: str) -> str:
    """The report's cross-rank path: from its heading to the next table group's heading."""
    start = page.index('<h3 id="cross-rank-path">')
    return page[start : page.index("<h3>", start)]


def _md_table(md: str, heading: str) -> list[list[str]]:
    """The rows of the markdown table under ``#### heading`` (cells stripped)."""
    block = md[md.index(f"#### {heading}") :].split("\n\n", 2)[1]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in block.splitlines()[2:]]


@pytest.fixture(scope="module")
def hta_paths():
    return run_paths(run_graphs(trace_path(HTA_RUN), "local:1", cache=False))


@pytest.fixture(scope="module")
def gloo_md(slow_loader_2: DistributedRun, tmp_path_factory: pytest.TempPathFactory) -> str:  # noqa: F811
    out = tmp_path_factory.mktemp("gloo_report") / "report.md"
    main(["report", str(slow_loader_2.run_dir), "-o", str(out), "--no-cache"])
    return out.read_text()


# -- the report ------------------------------------------------------------------


def test_report_hta_two_ranks(hta_paths, tmp_path: Path) -> None:
    # In the report: per step the verdict, the bound-by split in percent,
    # path time per rank and the collectives, inside the Across ranks section
    out = tmp_path / "report.html"
    main(["report", str(trace_path(HTA_RUN)), "-o", str(out)])
    page = out.read_text()
    assert page.index('<h2 id="ranks">') < page.index('id="cross-rank-path"') < page.index('<h2 id="recommendations">')
    html = _subsection(page)
    assert [cp.step for cp in hta_paths] == [551, 552]
    for cp in hta_paths:
        assert f'<p class="kl-verdict"><b>{escape(cp.verdict)}</b></p>' in html
        assert f'<td class="num">{cp.length_us / 1000:,.3f}</td>' in html  # each step's length, ms
    # regression pin (kinetolens' own output): rank 1 holds 4 of the 5 collectives of step 552
    assert "rank 1&#39;s CPU ops hold 4 of 5 collectives of step 552 for 28.2 ms" in html
    path, length = combined(hta_paths)
    split = summarize(path.filter(pl.col("bound_by") != "dependency"), length)
    for share in split.filter(pl.col("us") > 0)["pct"]:  # 47.6%, never 0.476 or 47.57
        assert f">{units.percent(share / 100)}<" in html
    for rank, share in by_rank(path, length).select("rank", "pct").iter_rows():
        assert re.search(rf"<td class=\"name\">rank {rank}</td><td class=\"num\">[\d,.]+</td><td class=\"num\">{re.escape(units.percent(share / 100))}</td>", html)
    # The path crosses no collective here (each step's path stays on one rank): said in one line.
    assert all(cp.gates.height == 0 for cp in hta_paths)
    assert "No collective lies on the path of any step" in html
    for chart in ("bounds", "ranks"):
        assert f'id="kl-chart-cross-rank-{chart}"' in html


def test_report_gloo_names_the_slow_ranks_data_loading(gloo_md: str, slow_loader_2: DistributedRun) -> None:  # noqa: F811
    # In the report: the real run whose rank 1 sleeps in its data loading
    paths = run_paths(run_graphs(slow_loader_2.run_dir, "local:1", cache=False))
    md = gloo_md[gloo_md.index("### Critical path across ranks") :]
    assert [cp.step for cp in paths] == WHOLE_STEPS
    for cp in paths:
        assert f"- **{cp.verdict}**" in md
    steps = _md_table(md, "Per step")
    assert [r[0] for r in steps] == [str(s) for s in WHOLE_STEPS]
    assert [r[3] for r in steps] == [f"rank {cp.gate_rank}" for cp in paths]  # gated by
    # The sleeping rank gates every step, and the verdict names its data loading.
    assert [r[3] for r in steps] == [f"rank {SLOW_RANK}"] * len(WHOLE_STEPS)
    assert all(cp.verdict.startswith(f"rank {SLOW_RANK}'s data loading holds ") for cp in paths)
    assert [r[4] for r in steps] == ["data loading"] * len(WHOLE_STEPS)  # what bounds the step mostly
    bounds = _md_table(md, "What bounds the path")
    assert bounds[0][0] == "data loading" and bounds[0][2].endswith("%")
    ranks = _md_table(md, "Path time per rank")
    assert ranks[0][0] == f"rank {SLOW_RANK}" and len(ranks) <= 2
    # The collectives on the path and the rank each waited for, as the analysis has them.
    calls = _md_table(md, "Collectives on the path")
    gates = pl.concat([cp.gates.with_columns(step=pl.lit(cp.step)) for cp in paths])
    assert [(int(r[0]), int(r[2]), r[3]) for r in calls] == [(s, q, f"rank {g}") for s, q, g in gates.select("step", "seq", "gate_rank").iter_rows()]
    work = _md_table(md, "The largest work on the path")
    assert work[0][0] == f"rank {SLOW_RANK}" and work[0][2] == "data loading"


def test_report_64_ranks_reads_top_ranks_and_others(tmp_path: Path) -> None:
    # In the report: 64 ranks, a planted straggler (rank 17): its rank
    # first, only ranks on the path listed, and past the top ranks one row for the others
    run = tmp_path / "run"
    generate(trace_path("hta/trace_filter/sampled_rank-0.json.gz"), run, 64, 17, keep_every=0, plant=True, seed=3)
    ranks, graphs = run_summaries_and_graphs(run, "local", cache=False)
    assert len(ranks) == 64 and not isinstance(graphs, str)
    md = render_md(collect(kinetolens.load(run / "rank-0.json.gz", cache=False), ranks=ranks, graphs=graphs))
    # Only ranks on the path are listed, the heading says how many of the 64 that is.  (Which
    # rank the path takes after a collective is a tie: every rank finishes it together.)
    heading = re.search(r"#### (Path time per rank \((\d+) of the 64 ranks are on it\))", md)
    assert heading is not None
    rows = _md_table(md, heading[1])
    assert rows[0][0] == "rank 17" and len(rows) == int(heading[2]) < 10
    assert "rank 17's GPU compute holds every collective of step 551" in md
    work = _md_table(md, "The largest work on the path")
    assert work[0][:3] == ["rank 17", PLANTED_KERNEL, "GPU compute"]
    # Fewer named ranks than are on the path: the rest are one row, their shares summing up
    # (all named where only one more rank than that is on it).
    cut = cross_rank_section(graphs, top_ranks=1)
    assert not isinstance(cut, str) and cut is not None
    on = int(cut.run.ranks["ranks"].sum())
    named = cut.by_rank["rank"].to_list()
    assert named[0] == "rank 17"
    if on > 2:
        assert named[1:] == [f"{on - 1} other ranks"]
    else:
        assert len(named) == 2 and re.fullmatch(r"rank \d+", named[1])
    assert cut.by_rank["share_pct"].sum() == pytest.approx(100.0)


# -- the dashboard ------------------------------------------------------------------


@pytest.fixture(scope="module")
def logdir(slow_loader_2: DistributedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    root = tmp_path_factory.mktemp("cross_rank_dash")
    (root / "hta").mkdir()
    for r in (0, 1):
        place((root / "hta" / f"rank-{r}.pt.trace.json.gz"), trace_path(f"hta/trace_filter/sampled_rank-{r}.json.gz"))
    (root / "gloo").mkdir()
    for t in slow_loader_2.traces:
        place((root / "gloo" / t.name), t)
    return root


@pytest.fixture(scope="module")
def server(logdir: Path) -> Iterator[ThreadServer]:
    with dashboard_server(logdir) as srv:
        yield srv


def _first(logdir: Path, run: str) -> str:
    return sorted(p.name for p in (logdir / run).iterdir())[0]


def _view(srv: ThreadServer, run: str, worker: str, step: int | None = None) -> list[dict]:
    q = {"run": run, "worker": worker, "ranks": "all", **({"step": step} if step is not None else {})}
    status, body, _ = srv.poll(f"/api/view/distributed?{urlencode(q)}", timeout=180)
    assert status == 200, body
    return body["blocks"]


def _rows(srv: ThreadServer, run: str, worker: str, source: str) -> pl.DataFrame:
    q = urlencode({"run": run, "worker": worker, "ranks": "all", "limit": 50})
    status, page, _ = srv.poll(f"/api/table/{source}?{q}", timeout=180)
    assert status == 200, page
    return pl.DataFrame([dict(zip([c["name"] for c in page["columns"]], r, strict=True)) for r in page["rows"]], orient="row")


def test_dashboard_distributed_page_over_http(server: ThreadServer, logdir: Path, hta_paths) -> None:  # noqa: F811
    # On the dashboard: the Distributed page opens with each step's verdict,
    # and pages the section's tables like every other table
    wk = _first(logdir, "gloo")
    blocks = _view(server, "gloo", wk)
    verdicts = [b["text"] for b in blocks if b["type"] == "text" and b["kind"] == "verdict"]
    paths = run_paths(run_graphs(logdir / "gloo", "local:1", cache=False))
    assert verdicts == [f"Critical path across ranks: {cp.verdict}" for cp in paths]
    assert blocks.index(next(b for b in blocks if b["type"] == "text")) == 0  # first on the page
    sources = {b["source"] for b in blocks if b["type"] == "table"}
    assert {"dist_path_steps", "dist_path_summary", "dist_path_by_rank", "dist_path_work"} <= sources
    gates = pl.concat([cp.gates.with_columns(step=pl.lit(cp.step)) for cp in paths])
    # A real run's timing decides whether a rank waited at a collective on the path:
    # the table where some did, the section's sentence where none did.
    assert ("dist_path_gates" in sources) == (gates.height > 0)
    if gates.height:
        calls = _rows(server, "gloo", wk, "dist_path_gates")
        assert calls["waited_for"].to_list() == [f"rank {g}" for g in gates["gate_rank"]]
    # The slowed rank and its data loading hold the path.
    assert _rows(server, "gloo", wk, "dist_path_by_rank")["rank"][0] == f"rank {SLOW_RANK}"
    work = _rows(server, "gloo", wk, "dist_path_work")  # largest first
    assert (work["rank"][0], work["bound"][0]) == (f"rank {SLOW_RANK}", "data loading")
    # One step chosen in the left panel: that step's path only.
    one = _view(server, "gloo", wk, WHOLE_STEPS[-1])
    (verdict,) = [b["text"] for b in one if b["type"] == "text" and b["kind"] == "verdict"]
    assert f"of step {WHOLE_STEPS[-1]} for " in verdict
    assert verdict.startswith(f"Critical path across ranks: rank {SLOW_RANK}'s data loading holds ")
    # HTA's pair: the same verdicts as the analysis.
    hta = [b["text"] for b in _view(server, "hta", _first(logdir, "hta")) if b["type"] == "text" and b["kind"] == "verdict"]
    assert hta == [f"Critical path across ranks: {cp.verdict}" for cp in hta_paths]


#: Figures drawn with no data, the page's width and the tables without rows.
LOOK = """() => {
  const figs = [...document.querySelectorAll('.js-plotly-plot')];
  const has = t => ['x', 'y', 'z', 'values', 'labels'].some(k => t[k] && t[k].length > 0);
  return {
    figures: figs.map(f => (f.layout.title || {}).text || '?'),
    empty_figures: figs.filter(f => !(f.data || []).some(has)).map(f => (f.layout.title || {}).text || '?'),
    scroll_width: document.documentElement.scrollWidth,
    inner_width: window.innerWidth,
    empty_tables: [...document.querySelectorAll('.table-block')]
                    .filter(b => { const s = b.querySelector('.scroll'); return s && !s.hidden && !b.querySelector('tbody tr'); })
                    .map(b => b.dataset.source),
  };
}"""
CHARTS = {"What bounds each step's path across ranks", "Path time per rank, each step"}


@pytest.fixture(scope="module")
def page() -> Iterator[object]:
    pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium")
    with chromium_page(WIDTH) as page:
        yield page


def _check(look: dict, where: str) -> None:
    assert CHARTS <= set(look["figures"]), f"{where}: charts {look['figures']}"
    assert look["empty_figures"] == [], f"{where}: empty charts {look['empty_figures']}"
    assert look["empty_tables"] == [], f"{where}: tables with no rows {look['empty_tables']}"
    assert look["scroll_width"] <= look["inner_width"], f"{where}: page {look['scroll_width']} px wide"


@pytest.mark.parametrize("run", ["hta", "gloo"])
def test_dashboard_page_in_chromium(server: ThreadServer, logdir: Path, page, run: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # On the dashboard: as a person sees it at 1280 px: both charts drawn, no
    # empty chart or table, nothing wider than the window
    wk = _first(logdir, run)
    page.goto(f"{server.url}/#" + urlencode({"run": run, "worker": wk, "view": "distributed"}))
    page.wait_for_selector(f'#content[data-key="{run}|{wk}|distributed"]', timeout=180000)
    page.wait_for_function("[...document.querySelectorAll('.table-block')].every(b => b.dataset.state === 'ready')", timeout=60000)
    page.screenshot(path=str(tmp_path / f"distributed_{run}.png"), full_page=True)
    assert page.locator("#content .error").count() == 0, page.inner_text("#content")
    _check(page.evaluate(LOOK), f"dashboard {run}")
    assert page.locator('.table-block[data-source="dist_path_by_rank"] tbody tr').count() in (1, 2)


def test_report_in_chromium(page, slow_loader_2: DistributedRun, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    # In the report: as a person sees it at 1280 px (the gloo run)
    out = tmp_path / "report.html"
    main(["report", str(slow_loader_2.run_dir), "-o", str(out), "--no-cache"])
    page.goto(out.as_uri())
    page.wait_for_function("[...document.querySelectorAll('.kl-chart')].every(d => d.querySelector('.main-svg'))")
    page.locator("#cross-rank-path").scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "report_gloo.png"), full_page=True)
    _check(page.evaluate(LOOK), "report gloo")
