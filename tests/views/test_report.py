"""Figures, the HTML report (rendered in headless Chromium offline) and the markdown report."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.gputime.idle import idle_breakdown, temporal_breakdown
from kinetolens.analysis.hardware.kernels import kernel_table, tensor_core_time
from kinetolens.analysis.memory.usage import memory_curve, memory_events
from kinetolens.analysis.workload.ops import op_stats
from kinetolens.analysis.gputime.overview import step_breakdown
from kinetolens.analysis.advice.recommendations import recommendations
from kinetolens.views import figures, units
from kinetolens.views.report_data import collect
from tests.conftest import trace_path

BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


@pytest.fixture(scope="module")
def bert() -> kinetolens.Trace:
    return kinetolens.load(trace_path(BERT))


def test_step_bars_add_up_to_each_step(bert: kinetolens.Trace) -> None:
    table = step_breakdown(bert)
    fig = figures.step_breakdown_figure(table)
    stacked = [sum(tr["y"][i] for tr in fig["data"]) for i in range(table.height)]
    # Every instant of a step is in exactly one category, so the bars are the step's wall time.
    assert stacked == pytest.approx((table["total"] / 1e6).to_list(), rel=1e-9)
    # the legend in words, not the categories' column ids
    assert {tr["name"] for tr in fig["data"]} >= {"GPU kernels", "memory copies", "CPU execution", "idle time (nothing busy)"}


def test_module_icicle_root_is_all_attributed_gpu_time(bert: kinetolens.Trace) -> None:
    modules = op_stats(bert, by="module")
    tree = figures.module_tree(modules)
    roots = tree.filter(pl.col("parent") == "")
    # Every kernel and memcpy of this trace runs under the model's module, so the
    # root holds the whole GPU time (kernels 307.197 us + memcpy 2.240 us).
    assert roots["id"].to_list() == ["BertLMHeadModel_0"]
    assert roots["total"].item() == pytest.approx(bert.kernels["dur"].sum() / 1000.0, abs=1e-6)
    # A parent is the sum of its own time and its children's.
    kids = tree.group_by("parent").agg(pl.col("total").sum().alias("kids"))
    checked = tree.join(kids, left_on="id", right_on="parent")
    assert checked.height > 5
    assert (checked["total"] - checked["own"] - checked["kids"]).abs().max() < 1e-6
    fig = figures.module_icicle_figure(modules)
    assert fig["data"][0]["type"] == "icicle" and fig["data"][0]["branchvalues"] == "total"


def test_tensor_core_pie_covers_all_gpu_time(bert: kinetolens.Trace) -> None:
    kernels = kernel_table(bert)
    pie = figures.tensor_core_figure(kernels)["data"][0]
    shares = dict(zip(pie["labels"], pie["values"], strict=True))
    assert sum(shares.values()) == pytest.approx(kernels["dur_us"].sum())
    assert shares["yes"] == pytest.approx(kernels.filter(pl.col("tc") == "yes")["dur_us"].sum())
    assert shares["yes"] > 0 and shares["no"] > 0


def test_report_tensor_core_split_is_the_kernel_tables(bert: kinetolens.Trace) -> None:
    # the report keeps each kernel's verdict and time, not the kernel table (a row of text per
    # kernel): its split must still be the one the kernel table (the dashboard's) gives
    data = collect(bert)
    assert data.kernel_verdicts.columns == ["tc", "dur_us"] and data.kernel_verdicts.height == bert.kernels.height
    assert tensor_core_time(data.kernel_verdicts).equals(tensor_core_time(kernel_table(bert)))
    pie = data.all_figures()["tensor_cores"]["data"][0]
    assert dict(zip(pie["labels"], pie["values"], strict=True)) == dict(tensor_core_time(kernel_table(bert)).iter_rows())


def test_top_ops_pie_keeps_the_rest_as_other(bert: kinetolens.Trace) -> None:
    ops = op_stats(bert)
    pie = figures.top_ops_figure(ops, top=3, kind="pie")["data"][0]
    assert len(pie["labels"]) == 4 and pie["labels"][-1] == "other"
    assert sum(pie["values"]) == pytest.approx(ops["device_total_us"].sum())
    bar = figures.top_ops_figure(ops, top=3)["data"][0]
    assert bar["x"][-1] == pytest.approx(ops["device_total_us"].max())  # largest drawn last (top of a horizontal bar)


def test_memory_and_idle_figures(bert: kinetolens.Trace) -> None:
    curve = memory_curve(memory_events(bert))
    fig = figures.memory_figure(curve)
    names = [tr["name"] for tr in fig["data"]]
    assert "GPU0 allocated" in names and "GPU0 reserved" in names
    gpu = curve.filter(pl.col("device") == "GPU0")
    drawn = next(tr for tr in fig["data"] if tr["name"] == "GPU0 allocated")
    scale = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10}[fig["layout"]["yaxis"]["title"]["text"]]  # the unit fits the peak
    assert max(drawn["y"]) == pytest.approx(gpu["allocated"].max() / scale)
    temporal = figures.temporal_figure(temporal_breakdown(bert))
    assert sum(tr["x"][0] for tr in temporal["data"]) == pytest.approx(100.0, abs=0.05)
    idle = figures.idle_figure(idle_breakdown(bert))
    assert sum(sum(tr["y"]) for tr in idle["data"]) == pytest.approx(idle_breakdown(bert)["idle_us"].sum())


def test_cpu_only_trace_gives_explaining_empty_figures() -> None:
    t = kinetolens.load(trace_path(CPU_ONLY))
    fig = figures.tensor_core_figure(kernel_table(t))
    assert not fig["data"] and "no GPU kernels" in fig["layout"]["annotations"][0]["text"]
    assert not figures.memory_figure(memory_curve(memory_events(t)))["data"]


# -- HTML report in a real browser, network off ---------------------------------------

CHROMIUM = Path("/usr/bin/chromium")
OUTPUT = Path(__file__).parents[1] / "output"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--no-first-run", "--disable-sync"]  # fmt: skip


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, timeout=300, check=False)


def _open_offline(html_file: Path, screenshot: Path) -> dict[str, Any]:
    """Load ``html_file`` in headless Chromium with every non-file request aborted."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: the browser check needs Debian's chromium")
    from playwright.sync_api import sync_playwright

    blocked: list[str] = []
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})

            def route(r: Any) -> None:
                if r.request.url.startswith("file://"):
                    r.continue_()
                else:
                    blocked.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(html_file.resolve().as_uri())
            page.wait_for_load_state("load")
            charts = page.evaluate(
                """() => Array.from(document.querySelectorAll('.plotly-graph-div')).map(d => ({
                    id: d.id,
                    svgs: d.querySelectorAll('svg.main-svg').length,
                    marks: d.querySelectorAll('path.point, g.slice, g.trace path, g.cartesianlayer path').length,
                    height: d.getBoundingClientRect().height}))"""
            )
            sections = page.evaluate("() => Array.from(document.querySelectorAll('h2')).map(h => h.id)")
            screenshot.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return {"charts": charts, "blocked": blocked, "errors": errors, "sections": sections}


def test_html_report_renders_every_chart_offline(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    run = _run_cli("report", str(trace_path(BERT)), "-o", str(out))
    assert run.returncode == 0, run.stderr
    text = out.read_text()
    # plotly.js is inline: no script or stylesheet is loaded from anywhere.
    assert "<script src" not in text and "<link" not in text
    assert text.count("Plotly.newPlot") == 10  # plotly.js itself once, one call per chart
    seen = _open_offline(out, OUTPUT / "report_bert_h100.png")
    assert seen["errors"] == [] and seen["blocked"] == []
    ids = [c["id"] for c in seen["charts"]]
    assert ids == [f"kl-chart-{n}" for n in
                   ("steps", "critical-path", "ops", "kernels", "tensor_cores", "modules", "roofline", "memory", "temporal", "idle")]  # fmt: skip
    for chart in seen["charts"]:
        assert chart["svgs"] >= 1 and chart["height"] > 100, chart
        assert chart["marks"] > 0, chart  # something was drawn, not an empty frame
    assert seen["sections"] == ["overview", "recommendations", "critical-path", "ops", "kernels", "modules", "sources", "roofline",
                                "memory", "idle"]  # the critical path after the recommendations
    # The numbers in the page are the analyses': first op row and the step count.
    assert "aten::addmm" in text and "197.598" in text
    assert "Low GPU utilization" in text


def test_cpu_only_html_report_still_renders(tmp_path: Path) -> None:
    out = tmp_path / "cpu.html"
    assert _run_cli("report", str(trace_path(CPU_ONLY)), "-o", str(out)).returncode == 0
    text = out.read_text()
    assert "Roofline left out: a CPU-only trace: no GPU was listed or used." in text
    seen = _open_offline(out, OUTPUT / "report_cpu_only.png")
    assert seen["errors"] == [] and all(c["svgs"] >= 1 for c in seen["charts"])


def test_markdown_report_matches_the_analyses(bert: kinetolens.Trace) -> None:
    run = _run_cli("report", str(trace_path(BERT)), "--format", "md")
    assert run.returncode == 0, run.stderr
    md = run.stdout
    for heading in ("## Overview", "## Recommendations", "## Top ops", "## Top kernels", "## Modules",
                    "## Roofline", "## Memory", "## GPU idle time"):  # fmt: skip
        assert heading in md
    step_ms = step_breakdown(bert)["total"].item() / 1e6
    assert f"| mean step time | {step_ms:.3f} ms |" in md
    top = op_stats(bert).sort("device_self_us", descending=True).row(0, named=True)  # ranked by self time
    scale = units.time_unit(top["device_self_us"])[1]  # one time unit per column (the top row's)
    assert f"| {top['name']} | {top['calls']} | {units.in_unit(top['device_self_us'], scale)} |" in md
    # Every table row has as many cells as its header (pipes in names are escaped).
    for block in md.split("\n\n"):
        rows = [r for r in block.splitlines() if r.startswith("| ")]
        if rows:
            cells = {len(re.findall(r"(?<!\\)\|", r)) for r in rows}
            assert len(cells) == 1, block


def test_run_directory_reports_its_first_rank(tmp_path: Path) -> None:
    run_dir = tmp_path / "job"
    run_dir.mkdir()
    for rank in (1, 0):
        shutil.copy(trace_path(BERT), run_dir / f"worker_rank{rank}.pt.trace.json.gz")
    out = tmp_path / "r.md"
    run = _run_cli("report", str(run_dir), "-o", str(out))
    assert run.returncode == 0, run.stderr
    md = out.read_text()
    # the ranks side by side first, then rank 0 in full.
    assert "holds 2 traces (ranks 0-1): Across ranks compares them" in md
    assert "the rest of this report is rank 0 (worker_rank0.pt.trace.json.gz)" in md
    assert md.index("## Across ranks") < md.index("## Recommendations for rank 0")


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (tmp_path / "missing.json", empty):
        run = _run_cli("report", str(target), "-o", str(tmp_path / "x.html"))
        assert run.returncode == 2
        assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr and str(target) in run.stderr
    # A missing folder is created; a file in the way is not replaced.
    (tmp_path / "file").write_text("")
    run = _run_cli("report", str(trace_path(BERT)), "-o", str(tmp_path / "file" / "x.html"))
    assert run.returncode == 2 and "cannot write report" in run.stderr


def test_notebook_html(bert: kinetolens.Trace) -> None:
    html_text = bert._repr_html_()
    assert f"<th style='text-align:left'>kernels</th><td style='text-align:left'>{bert.kernels.height:,} rows</td>" in html_text
    assert "NVIDIA H100 80GB HBM3" in html_text
    findings = recommendations(bert)
    card = findings[0]._repr_html_()
    assert findings[0].title in card and "ms per step" in card
    # A kernel name such as ``void f<a, b>(...)`` must not become a tag.
    fragment = collect(bert)._repr_html_()
    assert "<html" not in fragment and fragment.count("Plotly.newPlot") == 10  # the critical-path chart
    assert "&lt;BFloat16" in fragment and "<BFloat16" not in fragment  # short kernel names
