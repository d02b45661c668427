"""Per-rank charts sized to be read, for 2 ranks and for 64 (report
and dashboard; charts sized to be read).

The per-rank bars (``report RUNDIR``'s cross-rank section, the dashboard's
Distributed view) were 40 px a rank whatever the count: 64 ranks made a
2,700 px chart, and the report's cross-rank section had no chart at all.
Now each rank's bar keeps a readable height, a run of more than 32 ranks
shows the 16 ranks with the most and the 16 with the least (and says so),
and shares read as percent.  A real 2-rank run (HTA's sampled ranks) and a
64-rank run generated from it (bench/gen_ranks.py, one planted straggler),
rendered in real Chromium.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import place, trace_path
from tests.dashboard_helpers import RANKS, chromium_page

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gen_ranks import generate  # noqa: E402

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")

#: The chart's plot area, its bars' labels and its title.
CHART = """id => { const d = document.getElementById(id);
  return { plot_h: d._fullLayout._size.h, height: d.getBoundingClientRect().height,
           labels: [...d.querySelectorAll('.ytick text')].map(t => t.textContent),
           title: d._fullLayout.title.text }; }"""


@pytest.fixture(scope="module")
def page() -> Iterator[object]:
    with chromium_page(1280) as page:
        yield page


def report(run: Path, out: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "kinetolens.cli.main", "report", str(run), "-o", str(out)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


# the report's cross-rank section draws each rank's step, readable for 2 ranks
def test_two_rank_report_chart(page, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    run.mkdir()
    for i, rel in enumerate(RANKS):
        place((run / f"rank-{i}.pt.trace.json.gz"), trace_path(rel))
    page.goto(report(run, tmp_path / "r.html").as_uri())
    page.wait_for_selector("#kl-chart-cross_ranks .main-svg")
    chart = page.evaluate(CHART, "kl-chart-cross_ranks")
    page.locator("#kl-chart-cross_ranks").screenshot(path=str(tmp_path / "ranks2.png"))
    assert sorted(chart["labels"]) == ["rank 0", "rank 1"]
    assert chart["plot_h"] / 2 >= 40  # each bar's band
    # shares as percent, not 0.700
    cells = page.eval_on_selector_all("#ranks ~ table td", "tds => tds.map(td => td.textContent)")
    assert "70.0%" in cells and "0.700" not in cells  # regression pin: rank 1 arrives last at 7 of 10 collectives


# 64 ranks stay readable: 32 bars, the outliers, a chart that fits a screen or two
def test_many_rank_report_chart(page, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "r64"
    generate(trace_path(RANKS[0]), run, 64, 17, keep_every=8, seed=1)
    page.goto(report(run, tmp_path / "r64.html").as_uri())
    page.wait_for_selector("#kl-chart-cross_ranks .main-svg")
    chart = page.evaluate(CHART, "kl-chart-cross_ranks")
    page.locator("#kl-chart-cross_ranks").screenshot(path=str(tmp_path / "ranks64.png"))
    assert len(chart["labels"]) == len(set(chart["labels"])) == 32
    assert "32 of 64 ranks" in chart["title"]
    assert "rank 17" in chart["labels"]  # the planted straggler is among the outliers shown
    assert chart["plot_h"] / 32 >= 20 and chart["height"] <= 1200


# the dashboard's per-rank chart follows the same rule
def test_many_rank_dashboard_chart(tmp_path: Path) -> None:
    from urllib.parse import urlencode

    from kinetolens.views.dashboard.app import create_app
    from tests.dashboard_helpers import ThreadServer

    generate(trace_path(RANKS[0]), tmp_path / "r64", 64, 17, keep_every=8, seed=1)
    srv = ThreadServer(create_app(tmp_path, cache=False))
    try:
        q = urlencode({"run": "r64", "worker": "rank-0.json.gz", "ranks": "all"})  # as the page asks
        status, body, _ = srv.poll(f"/api/view/distributed?{q}", timeout=300)
        assert status == 200, body
        fig = next(b["figure"] for b in body["blocks"] if b["type"] == "figure")
        assert len(fig["data"][0]["y"]) == 32 and fig["layout"]["height"] <= 1200
        stragglers = srv.get_json(f"/api/table/dist_stragglers?{q}", timeout=120)[1]
        assert "last_share_pct" in [c["name"] for c in stragglers["columns"]]
        assert stragglers["text"][0][[c["name"] for c in stragglers["columns"]].index("last_share_pct")].endswith("%")
    finally:
        srv.stop()
