"""``kinetolens.profile(counters=["roofline"])`` collects CUPTI counters per
kernel on the GPU, and ``kinetolens counters`` maps them to the ops that
launched each kernel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

import kinetolens
from kinetolens.capture import counters as hw
from kinetolens.capture import layout
from tests.gpu import checks
from tests.gpu.models import TINY, Trainer
from tests.gpu.record import Recorder
from tests.gpu.test_gpu_training import cli


def test_roofline_counters_collected_and_mapped_to_ops(tmp_path: Path, recorder: Recorder, capfd: pytest.CaptureFixture[str]) -> None:
    # counters=["roofline"] collects CUPTI counters; `kinetolens counters` maps them to ops
    if hw.RANGE_PROFILER not in hw.counter_paths():
        pytest.skip(f"this torch offers no CUPTI range profiler (counter paths: {hw.counter_paths()})")
    trainer = Trainer(TINY, "cuda")
    for _ in range(2):
        trainer.step()
    trainer.sync()
    # Per-kernel range profiling replays each kernel: one step, no stacks.
    with kinetolens.profile(logdir=tmp_path, run="counters", counters=["roofline"], with_stack=False) as prof:
        trainer.step()
        trainer.sync()
    (path,) = prof.trace_files
    options = json.loads(layout.metadata_path(path).read_text())["options"]
    if not options["counters_recorded"]:
        # A torch whose Kineto accepts the configuration and records nothing (torch 2.11 +
        # CUDA 13): the profile must say so, in one line and in the trace's metadata.
        said = [line for line in capfd.readouterr().err.splitlines() if "counters: none recorded" in line]
        assert len(said) == 1, said
        pytest.skip(f"this torch ({torch.__version__}) recorded no counter values: {said[0]}")
    recorder.save("counters_roofline", path, ["counters"], config=TINY.__dict__)
    got = checks.check_counters(kinetolens.load(path, cache=False))

    res = cli("counters", str(path), "--json", "--no-cache", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout)
    assert len(rows) == got["profiled_kernels"]
    assert {r["pairing"] for r in rows} == {"launch order"}
    assert any(r["bottom_level_op"] in checks.GEMM_OPS and r["tc"] == "yes" for r in rows)
    table = cli("counters", str(path), "--no-cache", "-w", "80", cwd=tmp_path)
    assert table.returncode == 0 and "op stacks: launch order" in " ".join(table.stdout.split()), table.stdout[-2000:]
    recorder.report("counters_roofline", got)


def test_pm_sampling_counters_spread_over_kernels(tmp_path: Path, recorder: Recorder) -> None:
    # Where torch's Kineto samples counters (CUPTI PM sampling), the samples reach the trace and each kernel
    if hw.counter_paths()[:1] != (hw.PM_SAMPLING,):
        pytest.skip(f"this torch collects counters another way first (counter paths: {hw.counter_paths()})")
    trainer = Trainer(TINY, "cuda")
    with kinetolens.profile(logdir=tmp_path, run="pm", counters=list(checks.PM_METRICS), with_stack=False) as prof:
        for _ in range(20):  # a few ms of GPU work: several samples
            trainer.step()
        trainer.sync()
    (path,) = prof.trace_files
    recorder.save("counters_pm_sampling", path, ["pm_samples"], config=TINY.__dict__)
    got = checks.check_pm_samples(kinetolens.load(path, cache=False))
    res = cli("counters", str(path), "--no-cache", "-w", "80", cwd=tmp_path)
    assert res.returncode == 0 and "CUPTI PM sampling on GPU" in " ".join(res.stdout.split()), res.stdout[-2000:]
    recorder.report("counters_pm_sampling", got)
