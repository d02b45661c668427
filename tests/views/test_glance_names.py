"""Kernel names read the same in every dashboard table (terminal,
kernel names; report and dashboard).

The CLI shows a kernel by its short name (``--full-names`` for the recorded
one).  The dashboard's kernels page did too, but as a second column beside
the recorded name, and the op -> kernels detail table and the diff's kernel
table showed only the recorded signatures (``void cudnn::cnn::wgrad_alg0_
engine<float, 128, ...>(int, int, int, float const*, ...)``).  Now every
table's ``kernel`` column reads as the short name, the recorded name is the
cell's tooltip, and the panel's "full kernel names" box shows recorded names.
Real traces, a real server on loopback, real Chromium.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from kinetolens.registry.kernel_names import short_kernel_name
from tests.conftest import place, trace_path
from tests.dashboard_helpers import CHROMIUM_ARGS, RANKS, V100, ThreadServer

RUNS = {"v100": V100, "rank0": RANKS[0], "rank1": RANKS[1]}
WORKER = "w.pt.trace.json.gz"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    from kinetolens.views.dashboard.app import create_app

    root = tmp_path_factory.mktemp("names")
    for run, rel in RUNS.items():
        (root / run).mkdir()
        place((root / run / WORKER), trace_path(rel))
    srv = ThreadServer(create_app(root, cache=False))
    yield srv
    srv.stop()


def table(server: ThreadServer, source: str, run: str, **extra: str) -> dict:
    q = urlencode({"run": run, "worker": WORKER, **extra})
    status, body, _ = server.poll(f"/api/view/{'diff' if 'other_run' in extra else 'kernels'}?{q}")
    assert status == 200, body
    status, body = server.get_json(f"/api/table/{source}?{q}", timeout=120)
    assert status == 200, body
    return body


def column(page: dict, name: str) -> tuple[list[str], list[str]]:
    """(shown texts, raw values) of column ``name``."""
    i = [c["name"] for c in page["columns"]].index(name)
    return [r[i] for r in page["text"]], [r[i] for r in page["rows"]]


# the kernels page has one name column, read as the short name
def test_kernels_page_shows_short_names_with_the_recorded_one_underneath(server: ThreadServer) -> None:
    page = table(server, "kernels", "v100", limit="100")
    names = [c["name"] for c in page["columns"]]
    assert names[0] == "kernel" and "short_name" not in names
    shown, raw = column(page, "kernel")
    assert shown == [short_kernel_name(r) for r in raw]
    assert any(r.startswith("void ") for r in raw) and not any(s.startswith("void ") for s in shown)
    full, _ = column(table(server, "kernels", "v100", limit="100", full_names="1"), "kernel")
    assert full == raw
    # the filter box finds a kernel by the name the page shows
    long = next(s for s, r in zip(shown, raw) if s != r and "<" in s)
    found = table(server, "kernels", "v100", q=long)
    assert found["matched"] >= 1 and long in column(found, "kernel")[0]


# the diff's kernel table reads like the CLI's `diff`
def test_diff_kernel_table_shows_short_names(server: ThreadServer) -> None:
    page = table(server, "diff_kernel", "rank0", other_run="rank1", other_worker=WORKER, limit="200")
    shown, raw = column(page, "kernel")
    assert shown == [short_kernel_name(r) for r in raw]
    assert any(s != r for s, r in zip(shown, raw))


# the op -> kernels detail, in a browser, with the full name on hover and on request
def test_op_kernels_detail_shows_short_names(server: ThreadServer, tmp_path: Path) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("needs Debian's chromium")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{server.url}/#" + urlencode({"run": "v100", "worker": WORKER, "view": "operators"}))
        page.wait_for_selector(f'#content[data-key="v100|{WORKER}|operators"]', timeout=120000)

        def detail() -> list[tuple[str, str]]:
            page.wait_for_selector('.table-block[data-source="ops"][data-state="ready"] tbody tr', timeout=60000)
            page.click('.table-block[data-source="ops"] tbody tr')  # the op with the most device time
            page.wait_for_selector('.table-block[data-source="op_kernels"][data-state="ready"] tbody tr', timeout=60000)
            return page.eval_on_selector_all('.table-block[data-source="op_kernels"] tbody tr td:first-child',
                                             "tds => tds.map(td => [td.textContent, td.title])")  # fmt: skip

        cells = detail()
        page.screenshot(path=str(tmp_path / "op_kernels.png"), full_page=True)
        assert cells and all(text == short_kernel_name(title) for text, title in cells)
        assert any(title.startswith("void ") for _, title in cells)  # the recorded name, on hover
        assert not any("(int" in text or text.startswith("void ") for text, _ in cells)
        page.check("#full-names")
        page.wait_for_selector(f'#content[data-key="v100|{WORKER}|operators"]', timeout=120000)
        assert all(text == title for text, title in detail())
        browser.close()
