"""``kinetolens modules`` of a trace read a step window at a time.

From 1.5 GB of JSON (or with ``--windows``) the nn.Module tree is merged
from each step window's own kernels (launched in it), ops and forward calls
(starting in it) (:func:`kinetolens.runs.windowed_read.modules_in_windows`),
so memory holds a step; the tree and its roll-up by class are the whole
trace's, FLOPs and % of roof included.  ``--step`` reads the trace whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.same_rows import invoked, json_rows, same_rows
from tests.conftest import QWEN_H100, trace_path
from tests.cpu_capture import capture_script

QWEN_MI300 = "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
NO_STEPS = "tracelens/b200/eager_trace.json.gz"

CPU_MODEL = """
import sys, torch, kinetolens
torch.manual_seed(0)
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(128, 128)
        self.fc2 = torch.nn.Linear(128, 128)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Linear(128, 4)
    def forward(self, x):
        return self.head(self.blocks(x))
model = Net()
x = torch.randn(32, 128)
with kinetolens.profile(logdir=sys.argv[1], run="mods", steps=4, warmup=1, profile_memory=False) as prof:
    for _ in range(5):
        model(x).sum().backward()
        prof.step()
print(prof.trace_files[0])
"""


def _modules(path: Path, *options: str) -> tuple[int, str, str]:
    return invoked("modules", path, *options)


def _rows(path: Path, *options: str) -> list[dict]:
    return json_rows("modules", path, *options)


def _both_ways(path: Path) -> None:
    # the tree in its order; the roll-up by class is ranked by time
    for by, key in (("tree", "path"), ("type", "type")):
        same_rows(_rows(path, "--by", by, "--windows"), _rows(path, "--by", by, "--whole"), (key,), ordered=by == "tree")


def test_five_steps_of_a_gpu_trace_give_the_whole_tree(qwen_steps: Path) -> None:
    # Five windows: a sum over windows that counted a kernel, an op or a
    # forward call in two of them (or in none) would differ from the whole read.
    tree = _rows(qwen_steps, "--whole")
    assert next(r for r in tree if r["path"] == "Qwen2Model_0")["calls"] == 5
    assert any(r["pct_of_roof"] for r in tree)  # the roofline's figures are merged too
    _both_ways(qwen_steps)


@pytest.mark.parametrize("rel", [QWEN_H100, QWEN_MI300])
def test_one_step_traces_give_the_whole_tree(rel: str) -> None:
    _both_ways(trace_path(rel))


@pytest.fixture(scope="module")
def cpu_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four steps of a small model profiled on the CPU by kinetolens.profile."""
    return capture_script(CPU_MODEL, tmp_path_factory.mktemp("cpu_steps"))[0]


def test_a_cpu_trace_of_four_steps_gives_the_whole_tree(cpu_steps: Path) -> None:
    # Without kernels a module's time is its ops' host self time, and its
    # FLOPs the op table's (no GPU roof): merged as the op tables are.
    path = cpu_steps
    tree = _rows(path, "--whole")
    assert next(r for r in tree if r["path"] == "Net_0")["calls"] == 4
    assert next(r for r in tree if r["path"] == "Net_0")["flops"] > 0
    _both_ways(path)


@pytest.mark.parametrize("rel", [QWEN_H100, QWEN_MI300, "cpu"])
def test_a_window_split_anywhere_adds_up_to_the_whole_tree(rel: str, request: pytest.FixtureRequest) -> None:
    # Windows share the instants at their edges, and a step's late kernels run
    # into the next one's window: each part must count only what it owns (ops and
    # forward calls by their start, kernels by their launch).  One trace, cut in
    # two at three instants, each half counted on the whole trace: a part that
    # counted what it does not own would count it twice.
    import kinetolens
    from kinetolens.analysis.hardware.gpu_spec import gpu_spec
    from kinetolens.analysis.hardware.module_tree import merged_tree, module_part, module_tree
    from kinetolens.analysis.workload.ops import share_whole_ns

    trace = kinetolens.load(request.getfixturevalue("cpu_steps") if rel == "cpu" else trace_path(rel), cache=False)
    spec, gpu = gpu_spec(trace), trace.kernels.height > 0
    whole = module_tree(trace, spec)
    lo = int(min(trace.ops["ts"].min(), trace.kernels["ts"].min() if gpu else trace.ops["ts"].min()))
    hi = int((trace.ops["ts"] + trace.ops["dur"]).max()) + 1
    # cut where kernels are launched (or ops start, on the CPU) and inside the first step
    starts = (trace.kernels["launch_ts"] if gpu else trace.ops["ts"]).drop_nulls().sort()
    for cut in (int(starts[starts.len() // 3]), int(starts[starts.len() // 2]) + 1, int(trace.steps["ts"][0]) + 1):
        parts = [module_part(trace, spec, own, gpu) for own in ((lo, cut), (cut, hi))]
        halves = merged_tree(parts, share_whole_ns(trace))
        assert halves["path"].to_list() == whole["path"].to_list()
        for c in whole.columns:
            if whole[c].dtype.is_float():
                assert halves[c].fill_null(-1.0).to_list() == pytest.approx(whole[c].fill_null(-1.0).to_list(), rel=1e-9, abs=1e-9), c
            else:
                assert halves[c].to_list() == whole[c].to_list(), c


def test_the_terminal_says_how_it_was_read(qwen_steps: Path) -> None:
    code, out, err = _modules(qwen_steps, "--windows", "-w", "120")
    assert code == 0, err
    assert out.rstrip().endswith("read a step window at a time (5 steps)")
    code, whole, _ = _modules(qwen_steps, "--whole", "-w", "120")
    # the same rows and columns (a last digit may round the other way: sums added in another order)
    cells = lambda text: [line.split()[:2] for line in text.splitlines() if line.strip()]  # noqa: E731
    assert cells(whole) == cells(out)[:-1]


def test_a_trace_without_steps_is_read_whole_and_says_why() -> None:
    code, out, err = _modules(trace_path(NO_STEPS), "--windows", "--json")
    assert code == 0
    assert "ProfilerStep" in err and "whole" in err
    same_rows(json.loads(out), _rows(trace_path(NO_STEPS), "--whole"), ("path",), ordered=True)


def test_windows_with_a_step_is_one_line_of_error(qwen_steps: Path) -> None:
    code, out, err = _modules(qwen_steps, "--windows", "--step", "7")
    assert code == 2
    assert "--step reads the trace whole" in err and "Traceback" not in err
