"""One analysis session per trace: each base result is computed once per trace.

The CLI runs in-process with a profiler hook that counts real evaluations
of the base analyses' own code (not of the memoizing wrapper around them),
per trace object and arguments: a report or summary that recomputes one
(the op table, the roofline and the kernels table each evaluating every
op's FLOPs) fails here.
"""

from __future__ import annotations

import gc
import inspect
import json
import sys
import threading
import weakref
from collections import Counter
from types import CodeType
from typing import Any

import pytest
from click.testing import CliRunner

import kinetolens
from kinetolens.analysis.advice import recommendations as rec
from kinetolens.analysis.gputime import overview
from kinetolens.analysis.hardware import gpu_metrics, gpu_spec, tensor_cores
from kinetolens.analysis.inference import phases
from kinetolens.analysis.memory import usage
from kinetolens.analysis.paths import dependency_graph
from kinetolens.analysis.session import session_of, warnings_of
from kinetolens.analysis.summary import summarize
from kinetolens.analysis.workload import ops, work
from kinetolens.cli.main import cli
from kinetolens.errors import TraceWarning
from tests.conftest import trace_path

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
QWEN_H100 = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"

#: The base results, by name: the code that computes each.
BASE = {
    "carried_work": work.carried_work,
    "kernel_work": work.kernel_work,
    "kernel_tensor_cores": tensor_cores.kernel_tensor_cores,
    "op_tensor_core_eligibility": tensor_cores.op_tensor_core_eligibility,
    "op_stats": ops.op_stats,
    "step_windows": overview.step_windows,
    "step_breakdown": overview.step_breakdown,
    "gpu_metrics": gpu_metrics.gpu_metrics,
    "peak_memory": usage.peak_memory,
    "device_spec": gpu_spec.device_spec,
    "findings": rec.findings,
    "dependency facts": dependency_graph.TraceFacts.__init__,
    "inference detection": phases.detect,
}
SIMPLE = (str, int, float, bool, type(None))


def _count_evaluations(args: list[str]) -> Counter[tuple[str, int, tuple[Any, ...]]]:
    """Evaluations of each base result per (name, trace, other simple arguments) in one CLI run."""
    codes: dict[CodeType, str] = {inspect.unwrap(f).__code__: name for name, f in BASE.items()}
    counts: Counter[tuple[str, int, tuple[Any, ...]]] = Counter()
    # Every trace seen is kept alive for the run: a trace freed mid-run (a step's
    # sub-trace) could hand its id to the next one, and two traces' evaluations
    # would then count as one trace's two.
    alive: list[Any] = []

    def hook(frame: Any, event: str, _arg: Any) -> None:
        name = codes.get(frame.f_code) if event == "call" else None
        if name is None:
            return
        local = frame.f_locals
        trace = local["ctx"].trace if name == "findings" else local["trace"]
        rest = tuple(sorted((k, v) for k, v in local.items() if k not in ("trace", "self", "ctx") and isinstance(v, SIMPLE)))
        alive.append(trace)
        counts[(name, id(trace), rest)] += 1

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    assert result.exit_code == 0, result.output
    return counts


@pytest.mark.parametrize("rel", [RESNET, QWEN_H100], ids=["resnet50", "qwen-h100"])
@pytest.mark.parametrize("command", ["report", "summary"])
def test_each_base_result_is_computed_once_per_trace(rel: str, command: str, tmp_path) -> None:
    path = str(trace_path(rel))
    args = [command, path, "--format", "md", "-o", str(tmp_path / "r.md")] if command == "report" else [command, path]
    counts = _count_evaluations([*args, "--no-cache"])  # computed here, not read back from a summary cached earlier
    repeated = {f"{name} {dict(rest)}": n for (name, _, rest), n in counts.items() if n > 1}
    assert not repeated, f"computed more than once for one trace: {repeated}"
    names = {name for name, _, _ in counts}
    # The counting sees the base results at all (a renamed function would count nothing).
    assert {"carried_work", "kernel_tensor_cores", "step_windows", "findings", "device_spec", "peak_memory", "inference detection"} <= names


def _negative_mm(tmp_path) -> str:
    """A trace with one aten::mm whose recorded shape is impossible: its FLOP formula fails."""
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
             "args": {"Input Dims": [[-2, 3], [3, 4]], "Input type": ["float", "float"], "External id": 1}}  # fmt: skip
    path = tmp_path / "negative_mm.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [event]}))
    return str(path)


def test_an_analysis_warning_is_kept_in_the_session_not_written_into_the_trace(tmp_path) -> None:
    trace = kinetolens.load(_negative_mm(tmp_path), cache=False)
    work.carried_work(trace)
    assert trace.warnings == []  # the analysis read the trace and left it as loaded
    failed = [w for w in warnings_of(trace) if w.kind == work.FORMULA_FAILED]
    assert len(failed) == 1 and failed[0].count == 1 and "aten::mm" in failed[0].detail


def test_views_list_the_analysis_warnings_beside_the_readers(tmp_path) -> None:
    trace = kinetolens.load(_negative_mm(tmp_path), cache=False)
    trace.warnings.append(TraceWarning("reader note", 1, "a repaired event"))
    work.op_work(trace)
    assert [w.kind for w in summarize(trace).warnings] == ["reader note", work.FORMULA_FAILED]
    # The report's op table evaluates the FLOPs; its overview lists what that found.
    result = CliRunner().invoke(cli, ["report", _negative_mm(tmp_path), "--format", "md", "--no-cache"])
    assert result.exit_code == 0, result.output
    assert f"| warning | {work.FORMULA_FAILED}: aten::mm" in result.output


def test_a_session_does_not_keep_its_trace_alive(tmp_path) -> None:
    trace = kinetolens.load(str(trace_path("hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz")), cache=False)
    summarize(trace)
    dependency_graph.TraceFacts.of(trace)  # the one result that refers to its trace
    gone = weakref.ref(trace)
    del trace
    gc.collect()
    assert gone() is None


def test_a_trace_whose_tables_are_replaced_gets_a_fresh_session(tmp_path) -> None:
    import dataclasses

    trace = kinetolens.load(_negative_mm(tmp_path), cache=False)
    first = session_of(trace)
    assert session_of(trace) is first
    windows = overview.step_windows(trace)
    # the Trace is frozen: other tables make another Trace, with a session of its own
    other = dataclasses.replace(trace, ops=trace.ops.clear())
    assert session_of(other) is not first and session_of(trace) is first
    assert overview.step_windows(other) is not windows and overview.step_windows(trace) is windows
