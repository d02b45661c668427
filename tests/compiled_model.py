"""The small model compiled with ``torch.compile`` (inductor, C++ kernels on
the CPU) inside ``kinetolens.profile``, in its own interpreter (compiling
leaves global dynamo state behind).  ``conftest.compiled`` captures it once
per test session: compiling takes tens of seconds on a loaded machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

SCRIPT = """
    import json
    import sys
    import torch
    import torch._inductor.config as inductor_config
    import kinetolens

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 32)

        def forward(self, x):
            return torch.relu(self.lin(x)) * 2 + 1  # BLOCK

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()
            self.head = torch.nn.Linear(32, 4)

        def forward(self, x):
            return self.head(self.block(x)).softmax(-1)

    net = torch.compile(Net(), backend="inductor")
    x = torch.randn(8, 16)
    # compiled in the first (skipped) step, inside the profile
    with kinetolens.profile(logdir=sys.argv[1], run="compiled", steps=1, skip=1, warmup=0) as prof:
        for _ in range(2):
            net(x).sum().backward()
            prof.step()
    print(json.dumps({"fx_graph_cache": inductor_config.fx_graph_cache}))
"""
SCRIPT_NAME = "compiled_attr.py"
ROOT_MODULE = "OptimizedModule_0.Net_0"




def line_of(marker: str) -> int:
    """The script's line ending in ``# marker``."""
    lines = textwrap.dedent(SCRIPT).splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(f"# {marker}"))


def skip_reason() -> str | None:
    """Why this machine cannot compile the model (None when it can)."""
    try:
        import torch
        import torch._dynamo
    except ImportError:
        return "torch is not installed"
    if not torch._dynamo.is_dynamo_supported():
        return f"torch.compile is not supported on Python {sys.version.split()[0]} with torch {torch.__version__}"
    cxx = os.environ.get("CXX") or "g++"
    if shutil.which(cxx) is None:
        return f"inductor's CPU backend needs a C++ compiler and {cxx!r} is not on PATH"
    return None


def capture_compiled(tmp: Path) -> tuple[Any, dict[str, Any], Path]:
    """(loaded trace, inductor settings after the run, trace path)."""
    import kinetolens

    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    script = tmp / SCRIPT_NAME
    script.write_text(textwrap.dedent(SCRIPT))
    # kinetolens.profile names the C++ kernels itself: no TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE"}
    res = subprocess.run(
        [sys.executable, str(script), str(tmp / "runs")], cwd=tmp, env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (trace,) = (tmp / "runs" / "compiled").glob("*.pt.trace.json.gz")
    after = json.loads(res.stdout.strip().splitlines()[-1])
    return kinetolens.load(trace, cache=False), after, trace
