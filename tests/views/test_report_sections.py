"""The report at a glance: a cross-rank section for a run of several ranks,
sections without data left out with one line saying why, never an empty
chart, Tensor Core pies of one slice as a sentence, findings in full."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kinetolens

from kinetolens import load
from kinetolens.analysis.ranks.stragglers import straggler_findings
from kinetolens.runs import summarize_run
from kinetolens.views.report_data import collect
from kinetolens.views.report_md import render_md
from tests.distributed.runs import SLOW_RANK, DistributedRun, slow_loader_2  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "traces"
CPU_ONLY = SHARED / "hta" / "rank_non_gpu" / "rank_non_gpu.json.gz"
#: A real rank of a 4-rank NCCL job (HTA's sampled trace) to copy into a run.
RANK_SOURCE = SHARED / "hta" / "trace_filter" / "sampled_rank-0.json.gz"
#: nsys export of CloverLeaf (CUDA C++): many tiny kernels with long names.
CLOVERLEAF = SHARED / "nsys" / "pipit_perlmutter-cloverleaf-cuda.sqlite"
#: nsys export of an MPI + CUDA saxpy: all of its GPU time without Tensor Cores.
SAXPY = SHARED / "nsys" / "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
STRAGGLER = 2


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(Path(kinetolens.__file__).parents[1])}  # the code under test
    done = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four ranks copied from a real NCCL rank, rank 2 planted late (bench/gen_ranks.py)."""
    out = tmp_path_factory.mktemp("run4")
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gen_ranks.py"), str(out), "--ranks", "4",
         "--straggler", str(STRAGGLER), "--source", str(RANK_SOURCE)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return out


def _plots(page: str) -> list[list[dict]]:
    """The data array of every plotly chart on an HTML page."""
    decoder = json.JSONDecoder()
    out = []
    for m in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", page):
        data, _ = decoder.raw_decode(page, m.end())
        out.append(data)
    return out


def test_run_report_has_a_cross_rank_section(run_dir: Path, tmp_path: Path) -> None:
    # `report RUNDIR` compares every rank (step spread,
    # stragglers, collectives) and names the straggler, with the numbers of
    # the distributed analysis itself (the report does not recompute them).
    md = _cli("report", str(run_dir), "--format", "md").stdout
    html_path = tmp_path / "run.html"
    _cli("report", str(run_dir), "-o", str(html_path))
    page = html.unescape(html_path.read_text())
    (finding,) = straggler_findings(summarize_run(run_dir, "local", cache=False))
    assert finding.title.startswith(f"Rank {STRAGGLER} is late")
    for text in (md, page):
        assert "Across ranks" in text
        assert "4 ranks of world size 4" in text
        assert finding.title in text and finding.evidence in text and finding.change in text
        for heading in ("Arrival at collectives", "Per rank (ms per step)", "Step time across ranks", "Collectives"):
            assert heading in text, heading
    section = md[md.index("## Across ranks"): md.index("## Recommendations")]
    assert section.index(f"| {STRAGGLER} | yes |") < section.index("| 0 | no |")  # the straggler's row first, in words


def test_real_gloo_run_report_names_the_slow_rank(slow_loader_2: DistributedRun) -> None:  # noqa: F811
    # On a real 2-rank gloo DDP capture whose rank 1 loads
    # each batch 50 ms late.
    md = _cli("report", str(slow_loader_2.run_dir), "--format", "md").stdout
    section = md[md.index("## Across ranks"): md.index("## Recommendations")]
    assert f"**Rank {SLOW_RANK} is late" in section
    assert "2 ranks of world size 2, gloo" in section


def test_single_trace_report_has_no_cross_rank_section() -> None:
    # one trace is not a run.
    assert "Across ranks" not in render_md(collect(load(CPU_ONLY)))


def test_cpu_only_report_leaves_out_gpu_sections_and_says_why(tmp_path: Path) -> None:
    # a CPU-only trace (HTA's rank_non_gpu, no module
    # paths) gets no kernel, roofline, GPU idle or modules section, one line
    # each saying why, and not one chart without data.
    data = collect(load(CPU_ONLY))
    assert set(data.omitted) >= {"kernels", "roofline", "idle", "modules", "memory"}
    assert data.omitted["kernels"] == "Kernels left out: a CPU-only trace: no GPU was listed or used."
    assert "with_modules=True" in data.omitted["modules"]
    assert all(fig["data"] for fig in data.figures().values())
    out = tmp_path / "cpu.html"
    _cli("report", str(CPU_ONLY), "-o", str(out))
    page = out.read_text()
    plots = _plots(page)
    assert plots and all(traces for traces in plots)  # no chart with empty data
    for line in data.omitted.values():
        assert f">{line}</p>" in page
    for heading in ('<h2 id="kernels">', '<h2 id="idle">', '<h2 id="roofline">', '<h2 id="modules">'):
        assert heading not in page
    md = _cli("report", str(CPU_ONLY), "--format", "md").stdout
    assert "## Top kernels" not in md and "## GPU idle time" not in md
    assert "_Kernels left out: a CPU-only trace: no GPU was listed or used._" in md


def test_one_slice_tensor_core_pie_is_a_sentence(tmp_path: Path) -> None:
    # saxpy's GPU time all ran without Tensor Cores;
    # a pie of one "no" slice is one sentence instead.
    data = collect(load(SAXPY))
    note = data.chart_notes["tensor_cores"]
    assert re.fullmatch(r"All [\d,.]+ ms of GPU time ran without Tensor Cores\.", note)
    assert "tensor_cores" not in data.figures()
    out = tmp_path / "saxpy.html"
    _cli("report", str(SAXPY), "-o", str(out))
    page = out.read_text()
    assert note in page and 'id="kl-chart-tensor_cores"' not in page
    assert all(traces for traces in _plots(page))
    # nsys has no module paths and no source lines: left out, saying why.
    assert "Modules left out: not a PyTorch program" in page
    assert note in _cli("report", str(SAXPY), "--format", "md").stdout


def test_finding_cards_are_whole(tmp_path: Path) -> None:
    # every finding's evidence, change and estimate are
    # on the page whole (CloverLeaf's run: a sync finding).
    data = collect(load(CLOVERLEAF))
    assert {f.rule for f in data.findings} >= {"synchronization"}
    out = tmp_path / "clover.html"
    _cli("report", str(CLOVERLEAF), "-o", str(out))
    page = html.unescape(out.read_text())
    md = _cli("report", str(CLOVERLEAF), "--format", "md").stdout
    for f in data.findings:
        for text in (f.evidence, f.change, f.estimate):
            assert text in page
        assert f.evidence in md and f.change in md


CHROMIUM = Path("/usr/bin/chromium")


def test_side_by_side_charts_fit_their_half(tmp_path: Path) -> None:
    # As a reader sees it in Chromium: a chart in a
    # two-column grid is drawn at its column's width (it was drawn at the
    # page's width before its neighbour existed, covering the neighbour),
    # so the Tensor Core sentence beside the kernel pie is visible.
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: the browser check needs Debian's chromium")
    from playwright.sync_api import sync_playwright

    out = tmp_path / "saxpy.html"
    _cli("report", str(SAXPY), "-o", str(out))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(out.resolve().as_uri())
            page.wait_for_load_state("load")
            widths = page.evaluate(
                """() => Array.from(document.querySelectorAll('.kl-grid .plotly-graph-div')).map(d => [
                    d.id, d.getBoundingClientRect().width, Number(d.querySelector('svg.main-svg').getAttribute('width'))])"""
            )
            note = page.locator(".kl-chart-note").first
            note.scroll_into_view_if_needed()
            box = note.bounding_box()
            top = page.evaluate(
                "([x, y]) => document.elementFromPoint(x, y).className", [box["x"] + 5, box["y"] + box["height"] / 2]
            )
            page.screenshot(path=str(tmp_path / "saxpy.png"))
        finally:
            browser.close()
    assert widths and all(drawn <= cell + 1 for _, cell, drawn in widths), widths
    assert "kl-chart-note" in top  # the sentence, not a chart drawn over it
