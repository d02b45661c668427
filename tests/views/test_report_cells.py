"""The report's number cells read like the CLI's and the dashboard's.

Both report formats format their table cells through
:mod:`kinetolens.views.units`: memory in binary units, percent columns as
``55.5%``, one time unit per column named in its header, never an exponent
or float noise.
"""

from __future__ import annotations

import re

import pytest

import kinetolens
from kinetolens.views.report_data import collect
from kinetolens.views.report_html import render_html
from kinetolens.views.report_md import render_md
from tests.conftest import trace_path

CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
#: An exponent (1.49e-08, 1e+07) or float noise (0.30000000000000004) in a cell.
BAD = re.compile(r"\d ?e[+-]?\d|\.\d{7,}")


def _html_cells(page: str) -> list[str]:
    """Number cells of the HTML tables and of the module tree."""
    return re.findall(r'<td class="num">(.*?)</td>', page) + re.findall(r'<span class="n">(.*?)</span>', page)


def _md_cells(text: str) -> list[str]:
    return [c.strip() for line in text.splitlines() if line.startswith("|") for c in line.strip("|").split(" | ")]


@pytest.fixture(scope="module", params=[CPU_ONLY, QWEN])
def rendered(request: pytest.FixtureRequest) -> tuple[str, str]:
    data = collect(kinetolens.load(trace_path(request.param)))
    return render_html(data, standalone=False), render_md(data)


def test_no_exponent_or_float_noise_in_report_cells(rendered: tuple[str, str]) -> None:
    # the old formatter wrote "1.49e-08" (GiB) for the CPU's 16 B peak
    page, md = rendered
    cells = _html_cells(page)
    assert cells and not [c for c in cells if BAD.search(c)]
    rows = _md_cells(md)
    assert rows and not [c for c in rows if BAD.search(c)]


def test_memory_and_percent_cells_carry_units() -> None:
    # the Qwen H100 trace's memory table reads 1.95 GiB / 16 B, its idle shares 91.5%
    data = collect(kinetolens.load(trace_path(QWEN)))
    md = render_md(data)
    assert "| GPU0 | 1.95 GiB | 939 MiB |" in md  # regression pin: kinetolens' own peak (bytes in binary units)
    assert "| CPU | 16 B | - |" in md
    assert re.search(r"\| 0 \| [\d.,]+ \| 91\.5% \| 0\.4% \| 8\.1% \|", md)  # regression pin: idle shares
    # one time unit per column, named in the header
    assert "| category | mean per step (ms) | % of step |" in md
    page = render_html(data, standalone=False)
    assert "<td class=\"num\">1.95 GiB</td>" in page


def test_time_columns_read_as_words_in_titles(rendered: tuple[str, str]) -> None:
    # the overview said "ops ranked by device_self_us" and charts "Top ops by device_self_us",
    # "device_total_us by module": column names where people read titles
    page, _ = rendered
    titles = re.findall(r'"title":\{"text":"([^"]*)"', page) + re.findall(r"<td>ops ranked by</td><td>(.*?)</td>", page)
    assert titles
    assert not [t for t in titles if re.search(r"\b(device|host)_(self|total)_us\b", t)], titles
