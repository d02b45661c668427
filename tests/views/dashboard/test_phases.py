"""The dashboard's overview of an inference trace: engine iterations and phases
instead of training steps, in real Chromium against a real
server on loopback.

Traces: the vLLM piecewise graph replay (paired with its ``capture_traces/``
through the logdir, as ``serve`` finds it), the SGLang eager trace, a CPU
generation loop captured here (one prefill, three decodes: two phases, so
the per-phase tables offer a choice), and V100 ResNet-50 training, which
keeps its steps.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.inference.phases import inference_block, phase_tables
from kinetolens.registry.kernel_names import short_names
from kinetolens.views import units
from tests.conftest import place, trace_path
from tests.dashboard_helpers import V100, ThreadServer, chromium_page, dashboard_server

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")

VLLM_DIR = "tracelens/inference/vllm_prefilldecode_piecewise"
SGLANG = "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"
WIDTH = 1280

LOOP = """
import sys, torch, kinetolens
import torch.nn.functional as F
torch.manual_seed(0)

class TinyLM(torch.nn.Module):
    def __init__(self, vocab=128, d=32, h=4):
        super().__init__()
        self.h, self.embed = h, torch.nn.Embedding(vocab, d)
        self.qkv, self.head = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, vocab)
    def forward(self, ids, cache=None):
        x = self.embed(ids)
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        return self.head(y.transpose(1, 2).reshape(b, t, d)[:, -1]), (k, v)

model = TinyLM().eval()
with torch.inference_mode(), kinetolens.profile(logdir=sys.argv[1], run="loop", profile_memory=False, warmup=0,
                                                with_stack=True, with_modules=True):
    logits, cache = model(torch.randint(0, 128, (2, 48)))  # prefill: 2 prompts of 48 tokens
    for _ in range(3):  # decode: one new token a prompt
        logits, cache = model(logits.argmax(-1, keepdim=True), cache)
"""

#: What reads wrong at a glance: empty charts, empty tables, a page wider than the window.
LOOK = """() => {
  const figs = [...document.querySelectorAll('.js-plotly-plot')];
  const has = t => ['x', 'y', 'z', 'values', 'labels', 'ids'].some(k => t[k] && t[k].length > 0);
  return {
    empty_figures: figs.filter(f => !(f.data || []).some(has)).map(f => (f.layout.title || {}).text || '?'),
    figure_titles: figs.map(f => (f.layout.title || {}).text || '?'),
    scroll_width: document.documentElement.scrollWidth,
    inner_width: window.innerWidth,
    empty_tables: [...document.querySelectorAll('.table-block')]
                    .filter(b => !b.querySelector('tbody tr')).map(b => b.dataset.source),
    tables: [...document.querySelectorAll('.table-block')].map(b => b.dataset.source),
    cards: Object.fromEntries([...document.querySelectorAll('.card')].map(
             c => [c.querySelector('.label').textContent, c.querySelector('.value').textContent])),
  };
}"""


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("phases")
    vllm = trace_path(VLLM_DIR)
    (root / "vllm").mkdir()
    place((root / "vllm" / "graph_execution.json.gz"), vllm / "graph_execution.json.gz")
    place((root / "vllm" / "capture_traces"), vllm / "capture_traces")  # paired on load, as beside the replay
    (root / "sglang").mkdir()
    place((root / "sglang" / "sglang.json.gz"), trace_path(SGLANG))
    (root / "v100").mkdir()
    place((root / "v100" / "w.pt.trace.json.gz"), trace_path(V100))
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    subprocess.run([sys.executable, "-c", LOOP, str(root)], check=True, capture_output=True, timeout=300, env=clean)
    return root


@pytest.fixture(scope="module")
def server(logdir: Path) -> Iterator[ThreadServer]:
    with dashboard_server(logdir) as srv:
        yield srv


@pytest.fixture(scope="module")
def page() -> Iterator[object]:
    with chromium_page(WIDTH) as page:
        yield page


def worker(logdir: Path, run: str) -> Path:
    return next(p for p in (logdir / run).iterdir() if p.name.endswith(".json.gz"))


def open_overview(page, server: ThreadServer, run: str, wk: str) -> dict:  # type: ignore[no-untyped-def]
    page.goto(f"{server.url}/#" + urlencode({"run": run, "worker": wk, "view": "overview"}))
    page.wait_for_selector(f'#content[data-key="{run}|{wk}|overview"]', timeout=120000)
    page.wait_for_function("[...document.querySelectorAll('.table-block')].every(b => b.dataset.state === 'ready')",
                           timeout=60000)  # fmt: skip
    return page.evaluate(LOOK)


def column(page, source: str, col: str) -> list[str]:  # type: ignore[no-untyped-def]
    return page.eval_on_selector(
        f'.table-block[data-source="{source}"]',
        """(b, col) => { const i = [...b.querySelectorAll('thead th')].findIndex(th => th.dataset.col === col);
            return [...b.querySelectorAll('tbody tr')].map(tr => tr.children[i].textContent); }""",
        col,
    )


def check_look(look: dict, where: str) -> None:
    assert look["empty_figures"] == [], f"{where}: empty charts {look['empty_figures']}"
    assert look["empty_tables"] == [], f"{where}: tables with no rows {look['empty_tables']}"
    assert look["scroll_width"] <= look["inner_width"], f"{where}: page {look['scroll_width']} px wide"


@pytest.mark.parametrize("run", ["vllm", "sglang"])
def test_engine_traces_show_iterations_and_phases(server: ThreadServer, page, logdir: Path, run: str,  # type: ignore[no-untyped-def]
                                                  tmp_path: Path) -> None:  # fmt: skip
    # the overview of an inference trace shows its engine
    # iterations and phases (label, basis, tokens, tokens/s, time, breakdown;
    # each phase's top kernels and ops) instead of training steps.
    path = worker(logdir, run)
    look = open_overview(page, server, run, path.name)
    page.screenshot(path=str(tmp_path / f"{run}_overview.png"), full_page=True)
    assert page.locator("#content .error").count() == 0, page.inner_text("#content")
    check_look(look, run)
    assert look["tables"] == ["gpus", "phase_iterations", "phases", "phase_kernels", "phase_ops"]
    assert "steps" not in look["cards"] and "mean step" not in look["cards"]
    assert look["figure_titles"] == ["Engine iteration time breakdown"]
    # The same numbers as the analysis: one iteration, its phase, time, tokens and tokens/s.
    trace = kinetolens.load(path, cache=False)
    block = inference_block(trace)
    it = block.iterations[0]
    expected = {"vllm": ("mixed", 8192), "sglang": ("prefill", 15360)}[run]  # the engines' annotations say so
    assert (it.phase, it.tokens) == expected and len(block.iterations) == 1
    assert column(page, "phase_iterations", "phase") == [it.phase]
    assert column(page, "phase_iterations", "tokens") == [f"{it.tokens:,}"]
    assert column(page, "phase_iterations", "tokens_per_s") == [f"{it.tokens_per_s:,.0f}"]
    assert column(page, "phase_iterations", "dur_us") == [units.in_unit(it.dur_us, 1e3)]
    assert column(page, "phase_iterations", "basis")[0].startswith({"vllm": "vLLM execute_", "sglang": "SGLang step[EXTEND]"}[run])
    assert look["cards"]["iterations"] == f"1 ({it.phase} 1)"
    # Each phase's kernels: the analysis' top kernel of that phase comes first.
    kernels = phase_tables(trace, by="kernel")
    top = kernels.filter(pl.col("phase") == it.phase).row(0, named=True)
    assert column(page, "phase_kernels", "kernel")[0] == short_names(pl.Series([top["name"]]))[0]
    cell = page.locator('.table-block[data-source="phase_kernels"] tbody tr:first-child td').first
    assert cell.get_attribute("title") == top["name"]  # the recorded name on hover, as in the Kernels view
    assert page.inner_text('.table-block[data-source="phase_kernels"] h3').startswith(f"Top kernels in {it.phase}")
    assert page.locator('.table-block[data-source="phase_kernels"] select').count() == 0  # one phase: nothing to pick
    # The recommendations count per iteration too (vLLM: none, its 151 ms "sync idle" is the GPU clock's
    # 146 ms offset; SGLang: host-bound, aten::mm below its roof, its five hipMemcpyWithStream syncs).
    assert page.inner_text(".findings h3") == "Recommendations (estimated saving per iteration)"
    savings = page.locator(".finding .saving").all_inner_texts()
    assert len(savings) == {"vllm": 0, "sglang": 3}[run] and all(t.endswith("ms per iteration)") for t in savings)


def test_two_phases_offer_a_choice(server: ThreadServer, page, logdir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # a generation loop captured here (prefill of 2 x 48
    # tokens, then 3 decodes of one token a prompt): one row per iteration,
    # and the per-phase tables switch between prefill and decode.
    path = worker(logdir, "loop")
    look = open_overview(page, server, "loop", path.name)
    page.screenshot(path=str(tmp_path / "loop_overview.png"), full_page=True)
    check_look(look, "loop")
    assert column(page, "phase_iterations", "phase") == ["prefill", "decode", "decode", "decode"]
    assert column(page, "phase_iterations", "tokens") == ["96", "2", "2", "2"]
    assert column(page, "phases", "phase") == ["prefill", "decode"]
    assert column(page, "phases", "iterations") == ["1", "3"]
    ops = phase_tables(kinetolens.load(path, cache=False), by="op")
    sdpa = dict(ops.filter(pl.col("name") == "aten::scaled_dot_product_attention").select("phase", "calls").rows())
    assert sdpa == {"prefill": 1, "decode": 3}

    def sdpa_calls() -> str:
        ops_col = column(page, "phase_ops", "op")
        return column(page, "phase_ops", "calls")[ops_col.index("aten::scaled_dot_product_attention")]

    block = page.locator('.table-block[data-source="phase_ops"]')
    assert sdpa_calls() == "1"  # prefill first
    block.locator('select[data-choice="phase"]').select_option("decode")
    page.wait_for_function("""() => { const b = document.querySelector('.table-block[data-source="phase_ops"]');
        return b.dataset.state === 'ready' && b.querySelector('tbody tr'); }""")
    page.wait_for_timeout(200)
    assert sdpa_calls() == "3"  # the decode table, not the prefill one again from the memo


def test_training_trace_keeps_steps(server: ThreadServer, page, logdir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # a training trace's overview is unchanged: steps, the
    # step breakdown and the average step, no phase tables.
    look = open_overview(page, server, "v100", worker(logdir, "v100").name)
    page.screenshot(path=str(tmp_path / "v100_overview.png"), full_page=True)
    check_look(look, "v100")
    assert "steps" in look["cards"] and "iterations" not in look["cards"]
    assert "execution_summary" in look["tables"] and not [t for t in look["tables"] if t.startswith("phase")]
    assert look["figure_titles"] == ["Step time breakdown"]
    assert "per step" in page.inner_text(".findings h3")


def test_the_phase_cards_share_one_unit() -> None:
    # xDiT: 9.53, 31.4 and 326 ms, never "9,530 us" beside "31.4 ms".
    from kinetolens.views.dashboard.phases_page import cards

    block = inference_block(kinetolens.load(trace_path("tracelens/inference/xdit_flux.1/capture_traces/capture_trace_rank_0.json.gz")))
    means = [value for name, value in cards(block) if name.startswith("mean ")]
    assert means == ["9.530 ms", "31.395 ms", "326.112 ms"]
