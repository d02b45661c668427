"""A bf16 transformer forward captured into a CUDA graph and replayed, each
under ``kinetolens.profile``: loaded together, every replayed kernel gets
the op (and module) that launched it at capture (see
docs/graph-replay.md)"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

import kinetolens
from tests.gpu import checks
from tests.gpu.models import SMALL, GraphedForward, batch
from tests.gpu.record import Recorder


def test_graph_replay_kernels_get_their_capture_ops(tmp_path: Path, recorder: Recorder) -> None:
    # a CUDA-graph captured and replayed step whose replayed kernels get their ops
    graphed = GraphedForward(SMALL)
    with kinetolens.profile(logdir=tmp_path, run="graph_capture") as capture:
        graphed.capture()
        torch.cuda.synchronize()
    tokens, _ = batch(SMALL, "cuda", seed=1)
    with kinetolens.profile(logdir=tmp_path, run="graph_replay", steps=2, warmup=1) as replay:
        for _ in range(3):
            graphed.replay(tokens)
            replay.step()
    torch.cuda.synchronize()
    (capture_path,) = capture.trace_files
    (replay_path,) = replay.trace_files
    recorder.save("graph_replay", replay_path, ["graph_replay"], capture=capture_path, config=SMALL.__dict__)
    trace = kinetolens.load(replay_path, capture=capture_path, cache=False)
    recorder.report("graph_replay", checks.check_graph_replay(trace))
