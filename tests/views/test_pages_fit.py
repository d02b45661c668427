"""Pages fit what a reader sees: the report's kernel pie shows its whole
legend (no scroll box, nothing clipped) and the dashboard's operators table
fits a 1400 px window."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.conftest import place, trace_path
from tests.dashboard_helpers import chromium_page, dashboard_server
from tests.terminal import run_cli

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
B200 = "tracelens/b200/eager_trace.json.gz"

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")

LEGEND = """() => {
  const f = document.querySelector('#kl-chart-kernels');
  const svg = f.querySelector('svg.main-svg').getBoundingClientRect();
  const legend = f.querySelector('g.legend');
  const bar = legend.querySelector('.scrollbar');
  const right = Math.max(...[...legend.querySelectorAll('text.legendtext')].map(t => t.getBoundingClientRect().right));
  const bottom = legend.getBoundingClientRect().bottom;
  return {items: legend.querySelectorAll('g.traces').length, scroll: bar ? bar.getBoundingClientRect().height : 0,
          right, bottom, svg_right: svg.right, svg_bottom: svg.bottom};
}"""


def test_report_kernel_pie_legend_is_whole(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    proc = run_cli("report", str(trace_path(QWEN)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    with chromium_page(1400) as page:
        page.goto(out.as_uri())
        page.wait_for_selector("#kl-chart-kernels g.legend", timeout=60000)
        got = page.evaluate(LEGEND)
    assert got["items"] == 16, got  # 15 kernels and "other"
    assert got["scroll"] == 0, got  # every entry shown, none behind a scroll box
    assert got["right"] <= got["svg_right"] and got["bottom"] <= got["svg_bottom"], got


def test_dashboard_operators_table_fits_1400_px(tmp_path: Path) -> None:
    (tmp_path / "b200").mkdir()
    place(tmp_path / "b200" / "eager.json.gz", trace_path(B200))  # a copy: links out of the logdir are not served
    with dashboard_server(tmp_path) as srv, chromium_page(1400, 1000) as page:
        page.goto(f"{srv.url}/#" + urlencode({"run": "b200", "worker": "eager.json.gz", "view": "operators"}))
        page.wait_for_selector('#content[data-key="b200|eager.json.gz|operators"]', timeout=120000)
        page.wait_for_function("[...document.querySelectorAll('.table-block')].every(b => b.dataset.state === 'ready')",
                               timeout=60000)  # fmt: skip
        block, table, page_width = page.evaluate(
            "() => { const b = document.querySelector('.table-block[data-source=ops] .scroll');"
            " return [b.clientWidth, b.querySelector('table').scrollWidth, document.documentElement.scrollWidth]; }"
        )
    assert page_width <= 1400
    assert table <= block, (table, block)
