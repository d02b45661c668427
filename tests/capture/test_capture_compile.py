"""``torch.compile`` (inductor, CPU) under ``kinetolens.profile``: compiled
regions and inductor's generated kernels appear as ops, attributed to the
compiled module, and backward kernels to their forward compiled function.

The job runs in its own interpreter: compiling leaves global dynamo and
inductor state behind, and the source-line checks need a script file of
known lines.  Inductor's CPU kernels are C++; each is wrapped in a profiler
range (and so named in the trace) only with
``TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1``, which ``kinetolens run`` sets
by default and this test sets itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import polars as pl

import kinetolens


def _skip_reason() -> str | None:
    """Why inductor cannot compile for the CPU here, or None."""
    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        return f"torch.compile is not supported on Python {sys.version.split()[0]} with torch {torch.__version__}"
    cxx = os.environ.get("CXX") or "g++"  # what inductor's CPU backend invokes
    if shutil.which(cxx) is None:
        return f"inductor's CPU backend needs a C++ compiler and {cxx!r} is not on PATH"
    return None


SCRIPT = """
    import sys
    import torch
    import kinetolens

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x):  # FORWARD
            return torch.relu(self.lin(x)) * 2 + 1

    def train_step(net, x):  # STEP
        net(x).sum().backward()  # CALL

    net = torch.compile(Net(), backend="inductor")
    x = torch.randn(8, 16)
    train_step(net, x)  # compile forward and backward before profiling
    with kinetolens.profile(logdir=sys.argv[1], run="compiled", steps=2, warmup=1) as prof:
        for _ in range(3):
            train_step(net, x)
            prof.step()
"""
SCRIPT_NAME = "compiled_job.py"
MODULE = "OptimizedModule_0.Net_0"


def _line_of(marker: str) -> int:
    lines = textwrap.dedent(SCRIPT).splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(f"# {marker}"))


@pytest.fixture(scope="module")
def compiled_ops(tmp_path_factory: pytest.TempPathFactory) -> Any:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("compiled")
    script = tmp / SCRIPT_NAME
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE": "1"}
    res = subprocess.run(
        [sys.executable, str(script), str(tmp / "runs")],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a cold inductor cache compiles for tens of seconds
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (trace,) = (tmp / "runs" / "compiled").glob("*.pt.trace.json.gz")
    return kinetolens.load(trace, cache=False).ops


def _named(ops: Any, name: str) -> Any:
    return ops.filter(pl.col("name") == name)


def _inductor_kernels(ops: Any) -> Any:
    return ops.filter(pl.col("name").str.contains(r"^graph_\d+_cpp_fused_"))


def test_compiled_regions_are_ops(compiled_ops: Any) -> None:
    ops = compiled_ops
    for name in ("Torch-Compiled Region: 0/0", "CompiledFunction", "CompiledFunctionBackward"):
        assert _named(ops, name).height == 2, name  # once per recorded step
    graphs = ops.filter(pl.col("name").str.starts_with("## Call CompiledFxGraph"))
    assert graphs.height == 4  # the forward and the backward graph, per step
    kernels = _inductor_kernels(ops)
    assert kernels.height >= 4, "inductor's C++ kernels are not named in the trace"
    # the fused relu*2+1 of the forward and its backward both ran
    assert kernels.filter(pl.col("name").str.contains("relu")).height == 2
    assert set(kernels["direction"].to_list()) == {"fprop", "bprop"}


def test_compiled_ops_attributed_to_module(compiled_ops: Any) -> None:
    ops = compiled_ops
    inside = pl.concat(
        [
            _named(ops, "Torch-Compiled Region: 0/0"),
            _named(ops, "CompiledFunction"),
            _named(ops, "CompiledFunctionBackward"),
            ops.filter(pl.col("name").str.starts_with("## Call CompiledFxGraph")),
            _inductor_kernels(ops),
        ]
    )
    assert inside.height >= 14
    assert set(inside["module"].to_list()) == {MODULE}


def test_compiled_regions_attributed_to_script_lines(compiled_ops: Any) -> None:
    """The region is entered from ``train_step``'s line that calls the
    network (source lines: the call line kinetolens records, no
    longer the ``def`` line torch names the frame by); the compiled function
    runs inside ``forward`` with no recorded call line, so its source names
    that function."""
    ops = compiled_ops
    call = f"{SCRIPT_NAME}:{_line_of('CALL')}"
    forward = f"in forward ({SCRIPT_NAME}:{_line_of('FORWARD')})"
    assert set(_named(ops, "Torch-Compiled Region: 0/0")["source"].to_list()) == {call}
    assert set(_named(ops, "CompiledFunction")["source"].to_list()) == {forward}
    assert set(_named(ops, "CompiledFunctionBackward")["source"].to_list()) == {call}


def test_backward_kernels_link_to_forward_compiled_function(compiled_ops: Any) -> None:
    ops = compiled_ops
    fwd_ids = set(_named(ops, "CompiledFunction")["op_id"].to_list())
    bwd = _inductor_kernels(ops).filter(pl.col("direction") == "bprop")
    assert bwd.height >= 2
    assert set(bwd["fwd_op_id"].to_list()) == fwd_ids  # each step's to its own


def test_inductor_kernels_attributed_to_script_lines(compiled_ops: Any) -> None:
    """A kernel of a compiled graph belongs to the line of user code that ran
    the graph, not to inductor's generated wrapper module."""
    kernels = _inductor_kernels(compiled_ops)
    call = f"{SCRIPT_NAME}:{_line_of('CALL')}"
    forward = f"in forward ({SCRIPT_NAME}:{_line_of('FORWARD')})"
    assert set(kernels.filter(pl.col("direction") == "fprop")["source"].to_list()) == {forward}
    assert set(kernels.filter(pl.col("direction") == "bprop")["source"].to_list()) == {call}
