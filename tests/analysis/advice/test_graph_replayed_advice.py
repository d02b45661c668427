"""A step that already replays a CUDA graph is not told to use CUDA graphs."""

from __future__ import annotations

from kinetolens import load
from kinetolens.analysis.advice.recommendations import recommendations
from tests.conftest import trace_path

#: SGLang decode on B300: one cudaGraphLaunch replays 676 of the iteration's kernels.
DECODE = "tracelens/b300/qwen3_30b_a3b_decode/1782799835.6885648-TP-0-DECODE.trace.json.gz"


def test_graph_replayed_step_gets_no_graph_advice() -> None:
    found = recommendations(load(trace_path(DECODE)))
    assert "launch_overhead" not in {f.rule for f in found}
    host = next(f for f in found if f.rule == "host_bound")
    assert "already replays a graph" in host.change and "676" in host.change
    assert "replay the forward from CUDA/HIP graphs" not in host.change
