"""Phases of inference: engine iterations labelled prefill,
decode or mixed, with tokens/s and the step breakdown, in summary, phases
and the report; training traces keep their steps."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from kinetolens.analysis.inference import engine_annotations
from kinetolens.analysis.inference.phases import detect, iterations, phase_summary, phase_tables
from kinetolens.analysis.gputime.overview import COLUMNS
from kinetolens.analysis.summary import summarize
from kinetolens.analysis.trace_kind import trace_kind
from kinetolens.cli.main import cli
from kinetolens.loader import load
from kinetolens.views.report_data import collect
from kinetolens.views.report_html import render_html
from kinetolens.views.report_md import render_md
from tests.conftest import trace_path
from tests.cpu_capture import capture_small_mlp

VLLM = "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"
SGLANG = "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"
B200 = "tracelens/b200/eager_trace.json.gz"
XDIT_CAPTURE = "tracelens/inference/xdit_flux.1/capture_traces/capture_trace_rank_0.json.gz"


def _run(*args: str, columns: int = 120) -> str:
    done = CliRunner().invoke(cli, list(args), env={"COLUMNS": str(columns)}, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return done.output


def _flat(out: str) -> str:
    return re.sub(r"\s+", " ", out)


@pytest.fixture(scope="module")
def vllm():
    return load(trace_path(VLLM))


@pytest.fixture(scope="module")
def sglang():
    return load(trace_path(SGLANG))


def test_vllm_piecewise_is_one_mixed_iteration(vllm) -> None:
    # How we know: the replay trace's only user annotation is
    # execute_8192_context_9(sq8155sk8430...)_generation_37(sq37sk34489...):
    # 9 prefill (context) requests feeding 8,155 tokens and 37 decode
    # (generation) requests, one token each, in one 8,192-token batch.
    its = iterations(vllm)
    assert its.height == 1
    row = its.row(0, named=True)
    assert row["phase"] == "mixed" and row["source"] == "engine: vLLM"
    assert (row["prefill_requests"], row["prefill_tokens"], row["decode_requests"], row["decode_tokens"]) == (9, 8155, 37, 37)
    assert row["tokens"] == 8192 and row["requests"] == 46
    assert "9 prefill requests (8,155 tokens)" in row["basis"]
    # Its window runs from the annotation's start to the end of the GPU work
    # it launched (every kernel of the file, graph replays included).
    k = vllm.kernels
    assert row["start"] == row["ts"] and row["end"] == int((k["ts"] + k["dur"]).max())
    assert row["tokens_per_s"] == pytest.approx(8192 / (row["dur"] / 1e9))
    # The breakdown is the step breakdown's: parts add up to the window, the
    # kernel part is the union of kernel time (the GPU ran one kernel at a time).
    assert sum(row[c] for c in COLUMNS if c != "total") == row["total"] == row["dur"]
    kernel_ns = int(k.filter(pl.col("kind") == "kernel")["dur"].sum())
    assert row["kernel"] == pytest.approx(kernel_ns, rel=0.001)
    # The annotation is the iteration, not CPU work (as ProfilerStep#N is not):
    # cpu_exec is well under the 26.4 ms host range it spans.
    assert row["cpu_exec"] < 0.8 * (row["cpu_end"] - row["ts"])


def test_vllm_phase_tables_hold_the_iterations_kernels(vllm) -> None:
    # kernel/op tables per phase.  One mixed iteration launches
    # every kernel of the trace, so its kernel table's time is all kernel time.
    its = iterations(vllm)
    kernels = phase_tables(vllm, its, by="kernel")
    assert set(kernels["phase"]) == {"mixed"}
    total = vllm.kernels.filter(pl.col("kind") == "kernel")["dur"].sum() / 1000.0
    listed = kernels.filter(~pl.col("name").str.starts_with("Memcpy"))["device_total_us"].sum()
    assert listed == pytest.approx(total, rel=1e-6)
    ops = phase_tables(vllm, its, by="op")
    top = ops.row(0, named=True)
    # vllm::moe_forward (its kernels paired from the capture trace) leads, as in TraceLens' ops_summary.csv (124.886 ms).
    assert top["name"] == "vllm::moe_forward" and top["device_self_us"] == pytest.approx(124885.786, rel=1e-4)


def test_sglang_extend_step_is_prefill(sglang) -> None:
    # How we know: SGLang's own step[EXTEND bs=15
    # toks=15360] (EXTEND is SGLang's prefill) nests in an
    # execute_15360_context_15(...)_generation_0(...) range; the shapes agree:
    # aten::embedding takes ids [15360], aten::argmax logits [15, 151936].
    its = iterations(sglang)
    assert its.height == 1
    row = its.row(0, named=True)
    assert row["phase"] == "prefill" and row["source"] == "engine: SGLang"
    assert (row["tokens"], row["requests"], row["prefill_requests"], row["decode_requests"]) == (15360, 15, 15, 0)
    assert row["basis"].startswith("SGLang step[EXTEND]") and "vLLM execute_" in row["basis"]
    # The attention metadata agrees: the packed prefill attention takes 15,360
    # query tokens and cu_seqlens [16] (15 sequences), 1,024 tokens each.
    assert "shapes agree: " in row["basis"] and "15,360 query tokens for 15 sequences (cu_seqlens [16])" in row["basis"]
    # Both nested annotations are the iteration: neither counts as CPU work.
    assert row["cpu_exec"] < 5_000_000  # ns; the outer range alone is 522.7 ms
    assert row["tokens_per_s"] == pytest.approx(15360 / (row["dur"] / 1e9))
    assert row["dur"] == pytest.approx(987.367e6, rel=1e-4)  # regression pin: host start to the last kernel's end


def test_b200_vllm_native_annotation_is_prefill() -> None:
    # How we know: execute_context_1(888_788544)_generation_0(0):
    # one prompt of 888 tokens, no decode; aten::embedding takes ids [888].
    its = iterations(load(trace_path(B200)))
    assert its.select("phase", "tokens", "requests", "decode_requests").rows() == [("prefill", 888, 1, 0)]


def test_annotation_formats() -> None:
    # the engines' annotation formats (examples as the engines write them).
    p = engine_annotations.parse
    assert p("step[DECODE bs=64]").phase == "decode" and p("step[DECODE bs=64]").decode_requests == 64
    mixed = p("step[MIXED bs=2 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]")
    assert (mixed.phase, mixed.tokens, mixed.prefill_requests, mixed.decode_requests) == ("mixed", 6, 1, 1)
    decode = p("execute_64_context_0(sq0sk0sqsq0sqsk0)_generation_64(sq64sk131072sqsq64sqsk131072)")
    assert (engine_annotations.phase_of(decode.prefill_requests, decode.decode_requests), decode.tokens) == ("decode", 64)
    old = p("execute_new_2_cached_30")
    assert (old.phase, old.tokens) == ("mixed", None) and "chunked prefill" in old.basis
    atom = p("decode[bs=117/128 tok=117 d=117]")
    assert (atom.phase, atom.requests, atom.tokens) == ("decode", 117, 117)  # 128: CUDA-graph padding
    assert p("execute_diffusion_1_1024x1024") is None and p("ProfilerStep#3") is None


def test_summary_shows_phases_for_inference(vllm) -> None:
    # summary shows phases instead of training steps.
    info = summarize(vllm)
    assert info.kind.inference is True and trace_kind(vllm).inference
    block = info.inference
    assert block.detected and "engine iteration annotations (vLLM execute_)" in block.evidence
    assert [p.phase for p in block.phases] == ["mixed"] and block.phases[0].tokens == 8192
    for columns in (80, 120):
        out = _run("summary", trace_path(VLLM).as_posix(), columns=columns)
        assert "Engine iterations" in out and "Step time breakdown" not in out
        assert "mixed (iteration 0): vLLM execute_: 9 prefill requests (8,155 tokens)" in _flat(out)
        assert "8,192 in 308 ms, 26.6k tok/s" in out and "backward kernel time" not in out
        assert max(len(line) for line in out.splitlines()) <= columns


def test_phases_command_json_and_table(sglang) -> None:
    # kinetolens phases TRACE [--json].
    doc = json.loads(_run("phases", "--json", "-n", "3", trace_path(SGLANG).as_posix()))
    assert [r["phase"] for r in doc["iterations"]] == ["prefill"]
    assert doc["iterations"][0]["tokens_per_s"] == pytest.approx(15360 / 0.987367, rel=1e-4)
    assert len(doc["kernels"]["prefill"]) == 3 and doc["ops"]["prefill"][0]["name"] == "aten::mm"
    out = _run("phases", "-n", "3", trace_path(SGLANG).as_posix(), columns=80)
    assert "Top kernels in prefill" in out and "Top ops in prefill by GPU self time" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    # the heading's trace path is cut in the middle on one line, not folded mid-word
    path = trace_path(SGLANG).as_posix()
    heading = next(line for line in out.splitlines()[:3] if line.endswith(path[-20:]))
    assert heading.startswith(path[:10]) or heading.startswith("kinetolens phases:")


def test_report_shows_phases_for_inference(vllm, tmp_path: Path) -> None:
    # the report's overview shows the iterations, phases and
    # each phase's top kernels instead of the step breakdown.
    data = collect(vllm)
    html = render_html(data)
    assert 'id="phases"' in html and "Top kernels in mixed" in html and "Engine iteration time breakdown" in html
    assert "steps profiled" not in html and "26,624" in html  # tokens/s
    assert "How each phase was labelled" in html and "vLLM execute_: 9 prefill requests (8,155 tokens)" in html
    md = render_md(data)
    assert "### Phases of inference" in md and "### Step time" not in md


@pytest.fixture(scope="module")
def training_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace, _ = capture_small_mlp(tmp_path_factory.mktemp("train"))
    return trace


def test_training_trace_keeps_steps(training_trace: Path) -> None:
    # a training trace is never an inference trace.
    t = load(training_trace)
    found = detect(t)
    assert not found.inference and "backward" in (found.against or "")
    info = summarize(t)
    assert info.inference.detected is False and info.inference.iterations == ()
    out = _run("summary", training_trace.as_posix())
    assert "Step time breakdown" in out and "Engine iterations" not in out
    html = render_html(collect(t))
    assert 'id="phases"' not in html and "steps profiled" in html


def test_diffusion_capture_is_inference_without_llm_phases() -> None:
    # xDiT: the flux capture trace replays CUDA graphs and runs no backward,
    # so it is inference; its forwards are two text encoders and the compiled
    # denoiser, with no decode step.  Each root nn.Module call is an iteration
    # labelled by its module: no prefill or decode is invented, no tokens.
    t = load(trace_path(XDIT_CAPTURE))
    info = summarize(t)
    assert info.inference.detected and info.inference.evidence == ("CUDA/HIP graph replays",)
    its = info.inference.iterations
    assert [(i.phase, i.name) for i in its] == [
        ("CLIPTextModel", "CLIPTextModel_0"), ("T5EncoderModel", "T5EncoderModel_0"), ("OptimizedModule", "OptimizedModule_0"),
    ]
    assert all(i.tokens is None and i.phase not in ("prefill", "decode", "mixed") for i in its)
    # each iteration is its root module's call: 9.53, 31.40 and 326.11 ms of host range, none longer than the trace
    assert [round(i.dur_us / 1000, 2) for i in its] == [9.53, 31.4, 326.11]
    assert [p.phase for p in info.inference.phases] == ["CLIPTextModel", "T5EncoderModel", "OptimizedModule"]
    for columns in (80, 120):
        out = _run("phases", trace_path(XDIT_CAPTURE).as_posix(), columns=columns)
        assert "Model forwards" in out and "OptimizedModule" in out and "prefill" not in out and "tok/s" not in out
    # the report says the same: model forwards, no token columns, no prefill/decode wording
    html = render_html(collect(t))
    assert "3 model forwards, each a call of a root nn.Module and labelled by its module" in html
    assert "Model forward time breakdown" in html and "tokens/s" not in html.split('id="phases"')[1].split("<h4>")[0]


LOOP = """
import sys, torch, kinetolens
import torch.nn.functional as F
torch.manual_seed(0)

class Block(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h, self.qkv, self.out = h, torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
    def forward(self, x, cache):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        return self.out(y.transpose(1, 2).reshape(b, t, d)), (k, v)

class TinyLM(torch.nn.Module):
    def __init__(self, vocab=128, d=32, h=4):
        super().__init__()
        self.embed, self.block, self.head = torch.nn.Embedding(vocab, d), Block(d, h), torch.nn.Linear(d, vocab)
    def forward(self, ids, cache=None):
        x, cache = self.block(self.embed(ids), cache)
        return self.head(x[:, -1]), cache

model = TinyLM().eval()
prompt = torch.randint(0, 128, (2, 48))
def forward(ids, cache=None, label=None):
    if label is None:
        return model(ids, cache)
    with torch.profiler.record_function(label):  # the range vLLM V1 puts around each forward
        return model(ids, cache)

for run, modules, label in (("modules", True, None), ("plain", False, None), ("vllm", False, "gpu_model_runner: forward")):
    with torch.inference_mode(), kinetolens.profile(logdir=sys.argv[1], run=run, profile_memory=False, warmup=0,
                                                    with_stack=modules, with_modules=modules) as prof:
        logits, cache = forward(prompt, None, label)  # prefill: 2 prompts of 48 tokens
        for _ in range(4):  # decode: one new token a prompt
            logits, cache = forward(logits.argmax(-1, keepdim=True), cache, label)
    print(prof.trace_files[0])


class PackedLM(torch.nn.Module):
    # an engine's layout: the batch packed into one row of token ids, logits for each sequence's last token
    def __init__(self, vocab=128, d=32):
        super().__init__()
        self.embed, self.mlp, self.head = torch.nn.Embedding(vocab, d), torch.nn.Linear(d, d), torch.nn.Linear(d, vocab)
    def forward(self, ids, last):
        return torch.log_softmax(self.head(self.mlp(self.embed(ids))[last]), -1)

packed = PackedLM().eval()
with torch.inference_mode(), kinetolens.profile(logdir=sys.argv[1], run="packed", profile_memory=False, warmup=0) as prof:
    logp = packed(torch.randint(0, 128, (96,)), torch.tensor([47, 95]))  # prefill: 2 prompts of 48 tokens
    for _ in range(4):
        logp = packed(logp.argmax(-1), torch.tensor([0, 1]))  # decode: 2 tokens, one a sequence
print(prof.trace_files[0])
"""


@pytest.fixture(scope="module")
def loop_traces(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    pytest.importorskip("torch")
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    done = subprocess.run([sys.executable, "-c", LOOP, str(tmp_path_factory.mktemp("loop"))], capture_output=True,
                          text=True, timeout=300, env=clean)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [Path(line) for line in done.stdout.split() if line.endswith(".json.gz")]


def test_cpu_inference_loop_found_from_shapes(loop_traces: list[Path]) -> None:
    # a CPU-captured generation loop with no special names.
    # How we know: the script runs one forward on ids [2, 48], then four on
    # ids [2, 1] against a KV cache growing from 48 to 51 tokens.
    with_modules, plain = (load(p) for p in loop_traces[:2])
    its = iterations(with_modules)
    assert its["phase"].to_list() == ["prefill", "decode", "decode", "decode", "decode"]
    assert its["tokens"].to_list() == [96, 2, 2, 2, 2] and its["requests"].to_list() == [2] * 5
    assert set(its["source"]) == {"forward: model forward (root nn.Module call)"}
    assert "key [2, 4, 49, 8]: 1 new token a sequence, 49 in the KV cache" in its["basis"][1]
    assert (its["start"].diff().drop_nulls() > 0).all() and (its["end"] <= its["start"].shift(-1)).drop_nulls().all()
    found = detect(with_modules)
    assert found.inference and found.evidence == ("decode iterations (one new token a sequence) from shapes",)
    summary = phase_summary(its)
    assert summary.select("phase", "iterations", "tokens").rows() == [("prefill", 1, 96), ("decode", 4, 8)]
    # Without module ranges, each token embedding starts an iteration: the same labels and tokens.
    bare = iterations(plain)
    assert bare["phase"].to_list() == its["phase"].to_list() and bare["tokens"].to_list() == [96, 2, 2, 2, 2]
    assert set(bare["source"]) == {"forward: token embedding calls (one per forward)"}
    ops = phase_tables(with_modules, its, by="op")
    sdpa = ops.filter(pl.col("name") == "aten::scaled_dot_product_attention")
    assert dict(sdpa.select("phase", "calls").rows()) == {"prefill": 1, "decode": 4}
    out = _run("summary", loop_traces[0].as_posix(), columns=80)
    assert "7 (prefill" not in out and "5 (prefill 1, decode 4)" in out and "Engine iterations" in out


def test_vllm_forward_ranges_labelled_from_shapes(loop_traces: list[Path]) -> None:
    # vLLM V1's "gpu_model_runner: forward" ranges carry no
    # counts: each is an iteration, labelled by the shapes inside it (the
    # same loop as above, each forward wrapped in such a range).
    t = load(loop_traces[2])
    its = iterations(t)
    assert its["phase"].to_list() == ["prefill", "decode", "decode", "decode", "decode"]
    assert set(its["source"]) == {"engine: vLLM"}
    assert its["basis"][0].startswith("vLLM gpu_model_runner: forward range (no counts); shapes: attention query [2, 4, 48, 8]")
    assert its.select("prefill_tokens", "decode_tokens").rows() == [(96, 0)] + [(0, 2)] * 4
    assert detect(t).evidence == ("engine iteration annotations (vLLM gpu_model_runner)",)
    # The ranges are the iterations, not CPU work: counted as such, CPU time
    # would fill each window (no GPU here); the ops inside leave gaps.
    assert (its["dur"] == its["cpu_end"] - its["ts"]).all() and (its["cpu_exec"] < its["dur"]).all()


def test_packed_batch_labelled_from_token_ids_and_logits(loop_traces: list[Path]) -> None:
    # a packed batch (engine layout, no attention op): ids
    # [96] with logits [2, 128] is 2 sequences of 48 tokens (prefill); ids [2]
    # with logits [2, 128] is one token a sequence (decode).
    its = iterations(load(loop_traces[3]))
    assert its["phase"].to_list() == ["prefill", "decode", "decode", "decode", "decode"]
    assert its.select("tokens", "requests").rows() == [(96, 2)] + [(2, 2)] * 4
    assert its["basis"][0] == "96 token ids for 2 sampled rows: more than one a sequence (mixed batches look the same)"
    assert its["basis"][1] == "2 token ids for 2 sampled rows: one a sequence"
