"""Rules that measure host-GPU gaps stay silent on a GPU clock offset from the host's."""

from __future__ import annotations

from kinetolens import load
from kinetolens.analysis.advice.recommendations import recommendations
from kinetolens.analysis.summary import summarize
from kinetolens.analysis.trace_kind import trace_kind
from tests.conftest import trace_path

#: A vLLM graph replay whose GPU times are 146.4 ms behind the host's.
OFFSET = "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"
GAP_RULES = {"synchronization", "host_bound", "launch_overhead"}


def test_offset_clocks_give_no_host_gpu_gap_advice() -> None:
    trace = load(trace_path(OFFSET))
    assert not trace_kind(trace).aligned_clocks
    assert not GAP_RULES & {f.rule for f in recommendations(trace)}


def test_summary_notes_the_rules_left_out_for_the_offset() -> None:
    info = summarize(load(trace_path(OFFSET)))
    note = info.recommendations_left_out
    assert note is not None and "synchronization" in note and "146.4 ms" in note
