"""Recommendations on inference traces speak of engine iterations, and give no
training advice.

Real traces: vLLM's piecewise graph replay (one mixed iteration, paired with
its capture), SGLang's eager trace (one prefill iteration), and a CPU
generation loop captured here that reads its prompts from a slow
DataLoader: the DataLoader rule would fire on it as on a training loop.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import kinetolens
from kinetolens.analysis.inference.phases import detect, iterations
from kinetolens.analysis.advice.recommendations import recommendations, recommendations_frame
from kinetolens.cli.main import cli
from tests.conftest import trace_path

VLLM = "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"
SGLANG = "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"
#: Advice that only means something to a training loop.
TRAINING_WORDS = re.compile(r"num_workers|DataLoader\(|zero_grad|foreach|fused=True|GradScaler|gradient|bucket|"
                            r"backward_prefetch|DistributedDataParallel|checkpointing", re.I)  # fmt: skip
STEP = re.compile(r"\bsteps?\b", re.I)


@pytest.fixture(scope="module")
def vllm() -> kinetolens.Trace:
    return kinetolens.load(trace_path(VLLM))


@pytest.fixture(scope="module")
def sglang() -> kinetolens.Trace:
    return kinetolens.load(trace_path(SGLANG))


def _texts(frame: pl.DataFrame) -> list[str]:
    return [t for col in ("title", "evidence", "change", "estimate") for t in frame[col].to_list()]


def test_sglang_findings_are_per_iteration(sglang) -> None:
    # the figures are the iteration's (its window: host
    # range to the end of its GPU work), and every word says iteration.
    recs = recommendations_frame(sglang)
    # Its five hipMemcpyWithStream (ROCm PyTorch's synchronous copy, .item()) drain the GPU: a sync finding.
    assert set(recs["rule"]) == {"host_bound", "below_roofline", "synchronization"} and set(recs["per"]) == {"iteration"}
    assert not [t for t in _texts(recs) if STEP.search(t)], "a finding still speaks of steps"
    its = iterations(sglang)
    assert its.height == 1
    it_ms = its["dur"][0] / 1e6
    # The whole-trace window (what a trace without ProfilerStep ranges was cut
    # into before) is 987.31 ms; the iteration's is 987.37 ms (regression pins).
    assert round(it_ms, 2) == 987.37
    host = recs.filter(pl.col("rule") == "host_bound").row(0, named=True)
    assert f"of the {it_ms:.2f} ms iteration)" in host["evidence"]
    assert host["change"].startswith("Cut host overhead per iteration: replay the forward from CUDA/HIP graphs")
    assert not TRAINING_WORDS.search(" ".join(recs["change"].to_list()))


def test_vllm_sync_idle_is_the_clock_offset_not_advice(vllm) -> None:
    # vLLM's one iteration ends in a hipEventSynchronize (synchronize_input_prep);
    # the "idle" after it (151 ms) is the replay's 146.4 ms GPU clock offset, so
    # no rule measuring host-GPU gaps advises on it.
    recs = recommendations(vllm)
    assert not {"synchronization", "host_bound", "launch_overhead"} & {f.rule for f in recs}


def test_summary_cli_says_per_iteration() -> None:
    # the terminal's heading names the unit
    out = CliRunner().invoke(cli, ["summary", trace_path(SGLANG).as_posix()], env={"COLUMNS": "80"}).output
    assert "What to change first (estimated saving per iteration)" in out
    assert "per step" not in out


def test_report_cards_say_per_iteration(sglang, tmp_path: Path) -> None:
    # the report's recommendation cards too (HTML and Markdown)
    from kinetolens.views.report_data import collect
    from kinetolens.views.report_html import write_html
    from kinetolens.views.report_md import render_md

    data = collect(sglang)
    write_html(data, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    section = page[page.index('id="recommendations"'):]
    assert section.count("ms per iteration)") == 3 and "ms per step" not in section
    md = render_md(data)
    assert md[md.index("## Recommendations"):].count("ms per iteration)") == 3


LOOP = """
import sys, time, torch, kinetolens
torch.manual_seed(0)

class Prompts(torch.utils.data.Dataset):
    def __len__(self):
        return 2
    def __getitem__(self, i):
        time.sleep(0.05)  # slow preprocessing: a DataLoader stall, as a training loop's
        return torch.randint(0, 128, (16,))

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
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        return self.head(y.transpose(1, 2).reshape(b, t, d)[:, -1]), (k, v)

model = TinyLM().eval()
loader = torch.utils.data.DataLoader(Prompts(), batch_size=1)
with torch.inference_mode(), kinetolens.profile(logdir=sys.argv[1], run="serve", profile_memory=False, warmup=0,
                                                with_stack=True, with_modules=True) as prof:
    for prompt in loader:  # each request: a prefill, then two decodes
        logits, cache = model(prompt)
        for _ in range(2):
            logits, cache = model(logits.argmax(-1, keepdim=True), cache)
print(prof.trace_files[0])
"""


@pytest.fixture(scope="module")
def served_loop(tmp_path_factory: pytest.TempPathFactory) -> kinetolens.Trace:
    pytest.importorskip("torch")
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    done = subprocess.run([sys.executable, "-c", LOOP, str(tmp_path_factory.mktemp("served"))], capture_output=True,
                          text=True, timeout=300, env=clean)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return kinetolens.load(done.stdout.split()[-1], cache=False)


def test_no_dataloader_advice_to_a_server(served_loop) -> None:
    # requests read through a slow DataLoader in a
    # generation loop: inference (decode iterations, no backward), so the
    # DataLoader-workers advice of a training loop is not given.
    found = detect(served_loop)
    assert found.inference, found
    assert iterations(served_loop)["phase"].to_list() == ["prefill", "decode", "decode"] * 2
    rules = [f.rule for f in recommendations(served_loop)]
    assert "dataloader_bound" not in rules


def test_host_bound_on_a_server_names_no_data_loader():
    # a served model has no DataLoader, so the host-bound finding's evidence and
    # estimate must not explain its time by data loading (they said "not explained by data loading").
    found = [f for f in recommendations(kinetolens.load(trace_path(SGLANG))) if f.rule == "host_bound"]
    assert found, "the SGLang iteration is host-bound (50% of it waits for launches)"
    text = (found[0].evidence + found[0].estimate).lower()
    assert "data load" not in text and "dataloader" not in text
