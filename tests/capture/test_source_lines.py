"""Source lines that do not mislead (source lines).

torch names a ``python_function`` frame by the line where its function was
entered, so an op inside ``forward`` used to show the ``def`` line as its
source and module-level code the line where profiling began.  kinetolens'
capture now writes each op's exact call line (``capture.call_sites``),
operators such as ``h * 2`` and op-running properties such as ``.mT``
included; ops whose line was not recorded (bare torch.profiler traces)
show the enclosing function as ``in func (file:line)``.  Real captures of a small training script, through
``kinetolens.profile`` and ``kinetolens run``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from tests.conftest import TRACES

BERT = TRACES / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"

SCRIPT = textwrap.dedent(
    """
    import sys

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import kinetolens


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 4)

        def forward(self, x):  # DEF
            h = self.fc1(x)  # FC1
            h = torch.relu(h)  # RELU
            h = h * 2  # MUL
            h += 1  # IADD
            h = h.mT.mT  # PROPERTY
            h = h.softmax(-1)  # SOFTMAX
            return self.fc2(h)  # FC2


    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 8), torch.randn(4, 4)


    def train_step():
        out = model(x)  # MODEL
        loss = F.mse_loss(out, y)  # LOSS
        opt.zero_grad()  # ZERO
        loss.backward()  # BACKWARD
        opt.step()  # STEP


    if sys.argv[1:] == ["profile"]:
        with kinetolens.profile(logdir="runs", run="profiled", steps=2, warmup=1) as prof:
            for _ in range(4):
                train_step()
                prof.step()
    else:
        for _ in range(8):
            train_step()
    """
)


def line_of(tag: str) -> int:
    return next(i for i, text in enumerate(SCRIPT.splitlines(), 1) if text.endswith(f"# {tag}"))


def _run(tmp_path: Path, *command: str) -> Path:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.run(
        [*command, str(script)] if command[-1] != "profile" else [sys.executable, str(script), "profile"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    traces = sorted((tmp_path / "runs").rglob("*.pt.trace.json.gz"))
    assert len(traces) == 1, proc.stderr
    return traces[0]


@pytest.fixture(scope="module", params=["kinetolens.profile", "kinetolens run"])
def captured(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp_path = tmp_path_factory.mktemp("source_lines")
    if request.param == "kinetolens.profile":
        trace = _run(tmp_path, "profile")
    else:
        trace = _run(tmp_path, sys.executable, "-m", "kinetolens.cli.main", "run", "--logdir", "runs",
                     "--steps", "2", "--warmup", "1", "--", sys.executable)  # fmt: skip
    # torch names files relative to the sys.path entry they were found under
    # (here the script's directory, as python puts it first on sys.path).
    return trace, Path("train.py")


def _sources(ops: pl.DataFrame, name: str) -> set[str]:
    return set(ops.filter(pl.col("name") == name)["source"].to_list())


# source lines
def test_training_step_lines(captured: tuple[Path, Path]) -> None:
    """Loss, backward, zero_grad and step each get their own line, and so
    does each line of ``forward`` that calls a function; before, all of the
    step's ops showed ``train_step``'s ``def`` line (or, under ``kinetolens
    run``, the line of ``<module>`` where profiling began)."""
    trace, script = captured
    ops = kinetolens.load(trace).ops

    def at(tag: str) -> set[str]:
        return {f"{script}:{line_of(tag)}"}

    assert _sources(ops, "aten::mse_loss") == at("LOSS")
    assert _sources(ops, "Optimizer.zero_grad#SGD.zero_grad") == at("ZERO")
    assert _sources(ops, "Optimizer.step#SGD.step") == at("STEP")
    # The autograd engine's ops run inside loss.backward() on this CPU thread.
    assert set(ops.filter(pl.col("name").str.starts_with("autograd::engine::"))["source"].to_list()) == at("BACKWARD")
    linears = ops.filter(pl.col("name") == "aten::linear").sort("ts")
    assert set(linears["source"].to_list()) == at("FC1") | at("FC2")
    assert linears["source"].to_list()[:2] == [f"{script}:{line_of('FC1')}", f"{script}:{line_of('FC2')}"]
    assert _sources(ops, "aten::relu") == at("RELU")
    assert _sources(ops, "aten::softmax") == at("SOFTMAX")


# source lines (each line inside forward, operator-only lines too)
def test_operator_lines_get_their_own_line(captured: tuple[Path, Path]) -> None:
    """``h * 2`` and ``h += 1`` call no function (C type slots): torch
    records no call for them, so before they showed ``in forward (def
    line)``.  kinetolens' capture makes the operators recorded calls, so
    each gets its own line; no other line of the step claims them."""
    trace, script = captured
    ops = kinetolens.load(trace).ops
    fprop = ops.filter(pl.col("direction") == "fprop")
    mul = fprop.filter(pl.col("name") == "aten::mul")
    assert mul.height == 2  # one per recorded step
    assert set(mul["source"].to_list()) == {f"{script}:{line_of('MUL')}"}
    iadd = fprop.filter(pl.col("name") == "aten::add_")
    assert set(iadd["source"].to_list()) == {f"{script}:{line_of('IADD')}"}
    # ``.mT`` is a property that runs an op (aten::mT), also without a call
    assert set(fprop.filter(pl.col("name") == "aten::mT")["source"].to_list()) == {f"{script}:{line_of('PROPERTY')}"}
    # no op of the step is left with only its enclosing function
    assert not ops.filter(pl.col("cat") == "cpu_op")["source"].str.starts_with("in ").any()


# source lines
def test_capture_leaves_tensor_operators_as_they_were(tmp_path: Path) -> None:
    """The operators are Python methods only while a profile records stacks."""
    import torch

    before = {name: vars(torch.Tensor).get(name) for name in ("__mul__", "__getitem__", "__iadd__", "T", "real")}
    with kinetolens.profile(logdir=tmp_path, run="r", record_shapes=False, profile_memory=False) as prof:
        assert vars(torch.Tensor).get("__mul__") is not None  # installed while recording
        assert (torch.ones(2) * 3).tolist() == [3.0, 3.0]
        z = torch.zeros(2, dtype=torch.complex64)
        z.real = torch.ones(2)  # the property still sets
        assert z.real.tolist() == [1.0, 1.0] and torch.eye(2).T.tolist() == [[1.0, 0.0], [0.0, 1.0]]
        prof.step()
    assert {name: vars(torch.Tensor).get(name) for name in before} == before


# source lines
def test_cli_ops_by_source_shows_each_line(captured: tuple[Path, Path]) -> None:
    trace, script = captured
    proc = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "ops", "--aggregate-by", "source", "--top", "50", str(trace)],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="250"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for tag in ("LOSS", "BACKWARD", "FC1", "FC2", "RELU", "MUL", "IADD", "PROPERTY", "SOFTMAX"):
        assert f"{script}:{line_of(tag)} " in proc.stdout, tag
    assert f"in forward ({script}:{line_of('DEF')})" not in proc.stdout


# source lines
def test_report_has_source_lines(captured: tuple[Path, Path]) -> None:
    trace, script = captured
    proc = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "report", "--format", "md", "--no-cache", str(trace)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    section = proc.stdout.split("\n## Source lines\n", 1)[1].split("\n## ", 1)[0]
    assert "in func (file:line) means only the enclosing user function is known" in section
    for tag in ("LOSS", "BACKWARD", "FC1", "FC2", "MUL"):
        assert f"| {script}:{line_of(tag)} |" in section, tag
    assert f"| in forward ({script}:{line_of('DEF')}) |" not in section



# source lines
def test_bare_torch_trace_says_only_functions_are_known() -> None:
    """A trace from bare ``torch.profiler(with_stack=True)`` names frames by
    their entry line only: the kernels table shows each kernel's function,
    and the summary says how much kernel time has a call line (none)."""
    from kinetolens.analysis.hardware.kernels import kernel_table
    from kinetolens.analysis.summary import attribution

    trace = kinetolens.load(BERT)
    sources = kernel_table(trace)["source"]
    assert sources.null_count() == 0
    assert sources.str.starts_with("in ").all()
    assert sources[0] == "in forward (transformers/models/bert/modeling_bert.py:181)"
    shares = attribution(trace)
    assert shares.source == 1.0 and shares.source_call_line == 0.0
