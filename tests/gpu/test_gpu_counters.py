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
from tests.gpu import checks
from tests.gpu.models import TINY, Trainer
from tests.gpu.record import Recorder
from tests.gpu.test_gpu_training import cli


def test_roofline_counters_collected_and_mapped_to_ops(tmp_path: Path, recorder: Recorder) -> None:
    # counters=["roofline"] collects CUPTI counters; `kinetolens counters` maps them to ops
    trainer = Trainer(TINY, "cuda")
    for _ in range(2):
        trainer.step()
    trainer.sync()
    # Per-kernel range profiling replays each kernel: one step, no stacks.
    with kinetolens.profile(logdir=tmp_path, run="counters", counters=["roofline"], with_stack=False) as prof:
        trainer.step()
        trainer.sync()
    (path,) = prof.trace_files
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
