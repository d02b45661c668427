"""Advice and summary rows that fit the program: no GPU rows or GPU advice
for a CPU-only job, no PyTorch advice or fprop labels for an MPI or CUDA C++
program recorded by Nsight Systems."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

import kinetolens
import torch

from kinetolens import json_codec, load
from kinetolens.analysis.advice.recommendations import recommendations
from kinetolens.analysis.summary import summarize
from kinetolens.analysis.trace_kind import trace_kind
from kinetolens.analysis.trace_kind_type import TraceKind
from kinetolens.capture.profile import profile as kl_profile

ROOT = Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared" / "traces"
#: Nsight Systems exports of programs that are not PyTorch (pipit's MPI
#: saxpy and CloverLeaf).  nsys-ai's FastVideo export is a PyTorch program
#: recorded under torch.autograd.profiler.emit_nvtx (its NVTX ranges are
#: "aten::view, op_id = ..."), so PyTorch advice is right for it; it has its
#: own test below.
NSYS_PYTORCH = SHARED / "nsys" / "nsys-ai_h100_2gpu_1s.sqlite"
NSYS = sorted(p for p in (SHARED / "nsys").glob("*.sqlite") if p != NSYS_PYTORCH)
CPU_ONLY = [
    SHARED / "hta" / "rank_non_gpu" / "rank_non_gpu.json.gz",
    *sorted((SHARED / "hta" / "cpu_only").glob("*.json.gz")),
]
#: Words only advice for a PyTorch program uses.
PYTORCH_WORDS = (".item()", "foreach", "torch.", "aten::", "DataLoader", "DDP", "FSDP", "autocast", "non_blocking")
#: Words only advice for a GPU program uses.
GPU_WORDS = ("pin_memory", "onto the GPU", "GPU work", "CUDA", "kernel")
#: The planted DataLoader delay per batch.
LOAD_S = 0.02


def _cli(*args: str, columns: int = 120, empty_ok: bool = False) -> str:
    """stdout; with ``empty_ok`` a table with nothing to show may instead say why (exit 2, one line on stderr)."""
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(Path(kinetolens.__file__).parents[1])}  # the code under test
    done = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, env=env, timeout=300
    )
    if empty_ok and done.returncode == 2:
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        return done.stderr
    assert done.returncode == 0, done.stderr
    return done.stdout


def _flat(out: str) -> str:
    """Terminal output as one line: table borders and wrapping removed."""
    return re.sub(r"[\s│]+", " ", out)


class _SlowData(torch.utils.data.Dataset):
    """Batches that take LOAD_S to produce, in the training process."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(LOAD_S)
        return torch.randn(16), torch.randn(4)


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real CPU-only training run whose step waits on its DataLoader."""
    logdir = tmp_path_factory.mktemp("cpu_job")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(_SlowData(), batch_size=1)
    with kl_profile(logdir=logdir, run="cpu", steps=3, warmup=1, profile_memory=False) as prof:
        for i, (x, y) in enumerate(loader):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            prof.step()
            if i >= 8:
                break
    (path,) = prof.trace_files
    return Path(path)


def test_cpu_job_advice_fits_a_cpu_job(cpu_trace: Path) -> None:
    # the DataLoader advice for a job without a GPU
    # names worker processes, never pin_memory or moving work onto the GPU.
    trace = load(cpu_trace, cache=False)
    assert not trace_kind(trace).gpu and trace_kind(trace).pytorch
    found = {f.rule: f for f in recommendations(trace)}
    assert "dataloader_bound" in found  # the planted 20 ms per batch
    f = found["dataloader_bound"]
    text = " ".join((f.evidence, f.change, f.estimate))
    assert "num_workers" in f.change
    for word in ("pin_memory", "onto the GPU", "GPU work", "kernel"):
        assert word not in text, word
    assert all(rule == "dataloader_bound" or "gpu" not in rule for rule in found)


@pytest.mark.parametrize("columns", [80, 120])
def test_cpu_job_summary_has_no_gpu_rows(cpu_trace: Path, columns: int) -> None:
    # `kinetolens summary` of a CPU-only trace leaves out
    # the kernel-time rows, GPU event counts and GPU breakdown columns.
    out = _cli("summary", "--no-cache", str(cpu_trace), columns=columns)
    for row in ("kernel time", "with an op", "backward kernel time", "memcpy", "memset", "kernels 0", "GPUs during"):
        assert row not in out, row
    assert "(no GPU: GPU rows left out)" in _flat(out)
    assert "num_workers" in out and "pin_memory" not in out


@pytest.mark.parametrize("path", CPU_ONLY, ids=lambda p: p.name)
def test_hta_cpu_only_traces_have_no_gpu_rows(path: Path) -> None:
    # On HTA's CPU-only traces (gloo all_reduce: no GPU).
    info = summarize(load(path, cache=False))
    assert info.kind == TraceKind(gpu=False, pytorch=True, modules=False, inference=False, aligned_clocks=True)
    out = _cli("summary", str(path), columns=80)
    assert "kernel time" not in out and "memcpy" not in out and "CPU only (no GPU" in _flat(out)
    for f in info.recommendations:
        text = f["evidence"] + f["change"]
        assert not any(w in text for w in GPU_WORDS), f


@pytest.fixture(scope="module", params=NSYS, ids=lambda p: p.name)
def nsys_trace(request: pytest.FixtureRequest) -> Path:
    return request.param


def test_nsys_programs_are_not_pytorch(nsys_trace: Path) -> None:
    # an MPI + CUDA (saxpy) and a CUDA C++ (CloverLeaf)
    # program: a GPU, no PyTorch, so no fprop/bprop label on any range.
    trace = load(nsys_trace, cache=False)
    kind = trace_kind(trace)
    assert kind.gpu and not kind.pytorch
    assert set(trace.ops["direction"].cast(pl.String).unique().to_list()) <= {"other"}
    assert set(trace.kernels["direction"].cast(pl.String).drop_nulls().unique().to_list()) <= {"other"}


def test_nsys_advice_is_not_pytorch_advice(nsys_trace: Path, tmp_path: Path) -> None:
    # the rules still fire (both programs block on
    # cudaMemcpy / cudaDeviceSynchronize), worded for CUDA, not PyTorch.
    info = summarize(load(nsys_trace, cache=False))
    rules = [f.rule for f in info.recommendations]
    assert "synchronization" in rules
    as_json = json_codec.encode(info.recommendations).decode()
    assert "cudaMemcpyAsync" in as_json
    summary = _cli("summary", str(nsys_trace), columns=120)
    report = tmp_path / "r.md"
    _cli("report", str(nsys_trace), "-o", str(report))
    html = tmp_path / "r.html"
    _cli("report", str(nsys_trace), "-o", str(html))
    ops = _cli("ops", str(nsys_trace), columns=200, empty_ok=True)  # CloverLeaf records no NVTX: no op to list
    for name, text in (("json", as_json), ("summary", summary), ("md", report.read_text()), ("ops", ops)):
        for word in PYTORCH_WORDS:
            assert word not in text, (name, word)
        assert "fprop" not in text and "bprop" not in text, name
    page = html.read_text()
    body = page[page.index('<div class="kl-report">'):]
    for word in (".item()", "foreach", "fprop", "bprop", "torch.compile"):
        assert word not in body, word


def test_nsys_export_of_a_pytorch_program_gets_pytorch_advice() -> None:
    # The FastVideo run is PyTorch under nsys (emit_nvtx ranges name the
    # aten ops): its blocking syncs sit under aten::item, so the advice names
    # .item() rather than cudaMemcpyAsync/cudaDeviceSynchronize.
    trace = load(NSYS_PYTORCH, cache=False)
    kind = trace_kind(trace)
    assert kind.gpu and kind.pytorch
    sync = [f for f in recommendations(trace) if f.rule == "synchronization"]
    assert len(sync) == 1
    assert "aten::item" in sync[0].evidence and ".item()" in sync[0].change

