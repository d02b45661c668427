"""CPU CI over the CUDA traces the GPU suite recorded.

``tests/data/gpu/`` holds what ``bench/gpu_check.sh`` recorded on a GPU
machine: ``NAME.pt.trace.json.gz`` and ``NAME.expect.json`` (the checks that
apply and the figures torch reported at capture).  Each (recording, check)
pair is one test, running the very functions the GPU suite ran
(:mod:`tests.gpu.checks`), so a change that breaks CUDA traces fails here on
every machine.  ``KINETOLENS_GPU_DATA=DIR`` points the tests at another
folder (a fresh recording, before committing it).

Until a recording is committed the parametrized tests collect one skip that
says so; the tests below them run the same checks on real GPU traces from
``../shared`` (and on a CPU capture for FLOPs), so the checks themselves are
known to pass on good traces and to fail on broken ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from tests.conftest import TRACES
from tests.gpu import checks
from tests.gpu.record import MAX_TOTAL_BYTES

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("KINETOLENS_GPU_DATA") or REPO / "tests" / "data" / "gpu")


def _no_recordings() -> str:
    return f"no GPU recordings in {DATA}: run bench/gpu_check.sh on a GPU machine and commit its traces here"


def _recordings() -> list[Path]:
    return sorted(DATA.glob("*.expect.json")) if DATA.is_dir() else []


def _cases() -> list:
    cases = [
        pytest.param(path, check, id=f"{path.name.removesuffix('.expect.json')}-{check}")
        for path in _recordings()
        for check in json.loads(path.read_text())["checks"]
    ]
    return cases or [pytest.param(None, None, id="none", marks=pytest.mark.skip(reason=_no_recordings()))]


@pytest.mark.parametrize(("expect", "check"), _cases())
def test_recorded_gpu_trace(expect: Path, check: str) -> None:
    # attribution, Tensor Cores, FLOPs, graph replay... on the recorded CUDA traces
    checks.run_recorded(expect, check)


@pytest.mark.skipif(not _recordings(), reason=_no_recordings())
def test_recordings_are_described_and_small() -> None:
    # the note names GPU, driver, CUDA and torch; a few MB at most
    env = json.loads((DATA / "environment.json").read_text())
    for key in ("gpu", "driver", "cuda", "torch"):
        assert env.get(key), f"environment.json lacks {key}"
    total = 0
    for path in _recordings():
        expect = json.loads(path.read_text())
        assert set(expect["checks"]) <= set(checks.CHECKS), expect["checks"]
        for key in ("trace", "capture", "ncu"):
            if key in expect:
                total += (DATA / expect[key]).stat().st_size
    assert total <= MAX_TOTAL_BYTES, total


# -- the checks on real GPU traces, today ----------------------------------------------

B200 = "tracelens/b200/eager_trace.json.gz"
QWEN_H100 = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
VLLM = "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"


def _load(rel: str, **kw: object) -> kinetolens.Trace:
    return kinetolens.load(TRACES / rel, **kw)


def test_attribution_check_passes_and_fails() -> None:
    # the attribution bars hold on a real B200 inference trace, and a trace
    # that lost the op of 2% of its kernel time is refused
    trace = _load(B200)
    got = checks.check_attribution(trace, backward=False)
    assert got["op"] >= 0.99 and got["module_of_model_kernels"] >= 0.95
    kernels = trace.kernels
    order = kernels.filter(pl.col("kind") == "kernel").sort("dur", descending=True)
    # the longest kernels until 2% of kernel time has lost its op
    before = order["dur"].cum_sum().shift(1, fill_value=0)
    lost = order.filter(before < 0.02 * order["dur"].sum())["kernel_id"].implode()
    trace = dataclasses.replace(
        trace, kernels=kernels.with_columns(op_id=pl.when(pl.col("kernel_id").is_in(lost)).then(None).otherwise(pl.col("op_id")))
    )
    with pytest.raises(AssertionError):
        checks.check_attribution(trace, backward=False)
    with pytest.raises(AssertionError, match="no backward kernels"):
        checks.check_attribution(_load(B200), backward=True)  # an inference trace has none to link


def test_tensor_core_check_passes_and_fails() -> None:
    # bf16 GEMMs tc=yes, fp32 elementwise tc=no on a real H100 trace;
    # GEMM kernels renamed to a CUDA-core SGEMM are refused
    trace = _load(QWEN_H100)
    got = checks.check_tensor_cores(trace)
    assert got["bf16_gemm_kernels"] > 0 and got["fp32_elementwise_kernels"] > 0
    gemm_ids = trace.kernels.filter(pl.col("op").is_in(checks.GEMM_OPS))["kernel_id"].implode()
    trace = dataclasses.replace(trace, kernels=trace.kernels.with_columns(
        name=pl.when(pl.col("kernel_id").is_in(gemm_ids)).then(pl.lit("ampere_sgemm_128x64_tn")).otherwise(pl.col("name"))
    ))
    with pytest.raises(AssertionError, match="without a tc=yes kernel"):
        checks.check_tensor_cores(trace)


def test_graph_replay_check_passes_and_fails() -> None:
    # replayed kernels with their capture ops (vLLM's piecewise graphs
    # with their capture trace); without the capture trace the check refuses
    got = checks.check_graph_replay(_load(VLLM))
    assert got["replayed_kernels"] > 0 and got["with_capture_op"] >= 0.99
    with pytest.raises(AssertionError):
        checks.check_graph_replay(_load(VLLM, capture=False))


def test_memory_peak_check_tolerance() -> None:
    # within 5% of torch's max_memory_allocated passes, 6% off fails
    trace = _load(QWEN_H100)
    peak = 2088508416  # regression pin: kinetolens' GPU0 peak of this trace (allocator totals)
    assert checks.check_memory_peak(trace, int(peak / 1.04))["ratio"] == pytest.approx(1.04, rel=1e-6)
    with pytest.raises(AssertionError):
        checks.check_memory_peak(trace, int(peak / 1.06))


def test_flops_checks_on_a_cpu_capture(tmp_path: Path) -> None:
    # the FLOPs checks on the suite's own bf16-autocast transformer, captured
    # on the CPU here, against FlopCounterMode (GEMMs) and torch's SDPA formulas
    # (attention); a miscount is refused
    pytest.importorskip("torch")
    from tests.gpu.models import Config, Trainer, flop_counts

    cfg = Config(vocab=64, dim=32, heads=2, layers=1, seq=16, batch=2)
    trainer = Trainer(cfg, "cpu")
    trainer.step()
    counts = flop_counts(trainer)
    with kinetolens.profile(logdir=tmp_path, run="cpu", steps=2, warmup=1, with_stack=False, profile_memory=False) as prof:
        for _ in range(3):
            trainer.step()
            prof.step()
    trace = kinetolens.load(prof.trace_files[0], cache=False)
    got = checks.check_gemm_flops(trace, counts)
    assert got["steps"] == 2 and sum(got["gemm_flops_per_step"].values()) > 0
    wrong = dict(counts, **{"aten::mm": counts["aten::mm"] * 2})
    with pytest.raises(AssertionError, match="aten::mm"):
        checks.check_gemm_flops(trace, wrong)
    # FlopCounterMode has no formula for the CPU flash attention: torch's own SDPA
    # formulas (what it applies to the CUDA op) stand in for its count
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    shape = (cfg.batch, cfg.heads, cfg.seq, cfg.dim // cfg.heads)
    sdpa = {"aten::_scaled_dot_product_flash_attention": cfg.layers * sdpa_flop_count(shape, shape, shape),
            "aten::_scaled_dot_product_flash_attention_backward":
                cfg.layers * sdpa_backward_flop_count(shape, shape, shape, shape)}  # fmt: skip
    assert checks.check_attention_flops(trace, sdpa)["attention_flops_per_step"] > 0
    with pytest.raises(AssertionError):
        checks.check_attention_flops(trace, {k: 2 * v for k, v in sdpa.items()})


def test_recorded_tests_collect_and_run_a_recording(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # with recordings present the parametrized test collects one test per
    # (recording, check) and each runs its check (real B200 and H100 traces stand in
    # for recordings here); with none it collects one clear skip
    data = tmp_path / "gpu"
    data.mkdir()
    # (Qwen's trace holds kernels launched before its window: attribution is B200's)
    for name, rel, check in (("b200", B200, "attribution"), ("qwen", QWEN_H100, "tensor_cores")):
        (data / f"{name}.pt.trace.json.gz").symlink_to(TRACES / rel)
        (data / f"{name}.expect.json").write_text(json.dumps(
            {"trace": f"{name}.pt.trace.json.gz", "checks": [check], "backward": False}
        ))  # fmt: skip
    env = dict(os.environ, KINETOLENS_GPU_DATA=str(data))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), str(REPO), env.get("PYTHONPATH")) if p)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-o", "addopts=-ra", "-q", "--collect-only", "-p", "no:cacheprovider", f"{__file__}::test_recorded_gpu_trace"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    ids = sorted(re.findall(r"test_recorded_gpu_trace\[(.+)\]", res.stdout))
    assert ids == ["b200-attribution", "qwen-tensor_cores"], res.stdout[-2000:]
    monkeypatch.setattr(sys.modules[__name__], "DATA", data)
    for param in _cases():
        expect, check = param.values
        checks.run_recorded(expect, check)
    monkeypatch.setattr(sys.modules[__name__], "DATA", tmp_path / "missing")
    (none,) = _cases()
    assert none.values == (None, None)
    assert none.marks[0].kwargs["reason"].startswith(f"no GPU recordings in {tmp_path / 'missing'}: ")


# -- the suite's CPU side: what runs where no GPU is ---------------------------------------

CUDA = False
try:
    import torch as _torch

    CUDA = _torch.cuda.is_available()
except ImportError:
    pass


def _run(*cmd: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("OUT", None)
    return subprocess.run(list(cmd), cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.skipif(CUDA, reason="this machine has a GPU: the suite runs")
def test_gpu_suite_collects_and_skips_without_cuda() -> None:
    # every test of tests/gpu is marked gpu (a registered marker)
    # and skipped with the reason, so CPU CI stays green
    res = _run(sys.executable, "-m", "pytest", "-o", "addopts=-ra", "--strict-markers", "-m", "gpu", "-p", "no:cacheprovider", "-q", "-rs",
               "tests/gpu")  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:]
    skipped = re.search(r"(\d+) skipped", res.stdout)
    # one skip per test, or per module where torch itself is missing
    modules = len(list((REPO / "tests" / "gpu").glob("test_*.py")))
    assert skipped and int(skipped.group(1)) >= modules and "passed" not in res.stdout and "error" not in res.stdout, res.stdout
    assert "GPU suite: " in res.stdout or "could not import 'torch'" in res.stdout


@pytest.mark.skipif(CUDA, reason="this machine has a GPU")
def test_gpu_check_fails_fast_in_one_line_without_cuda() -> None:
    # on a machine without CUDA it stops at once, saying why, exit 2
    res = _run("bash", str(REPO / "bench" / "gpu_check.sh"))
    assert res.returncode == 2
    assert res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("gpu_check: no GPU to check: ")


@pytest.mark.skipif(CUDA, reason="this machine has a GPU")
def test_overhead_bench_refuses_cuda_without_a_gpu() -> None:
    # `bench/capture_overhead.py --device cuda` says why in one line instead of a traceback
    res = _run(sys.executable, str(REPO / "bench" / "capture_overhead.py"), "--device", "cuda")
    assert res.returncode == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("capture_overhead: --device cuda: ")


def test_cli_starts_without_plotly() -> None:
    # the GPU machine gets no plotly (its wheel does not fit the budget of
    # carried wheels): every command but report and roofline charts runs without it
    res = _run(sys.executable, "-c", "import sys, kinetolens.cli.main; print(sorted(m for m in sys.modules if m.split('.')[0] == 'plotly'))")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_triton_kernel_check_passes_and_fails() -> None:
    # a torch.compile trace's Triton kernels (TraceLens' MI300X trace):
    # named by their fused ops, each with its launch op; the provenance must be
    # what the trace allows (names only: compiled before kinetolens watched)
    trace = _load("tracelens/torch_compile_triton/trace.json.gz")
    got = checks.check_triton_kernels(trace, "name")
    assert got["triton_kernels"] > 0 and got["provenance"] == ["name"]
    with pytest.raises(AssertionError):
        checks.check_triton_kernels(trace, "inductor")
    trace = dataclasses.replace(trace, kernels=trace.kernels.with_columns(op_id=pl.lit(None, pl.Int64)))
    with pytest.raises(AssertionError):
        checks.check_triton_kernels(trace, "name")
