"""README.md's Python snippets run as written.

The analysis snippets run in order in one fresh interpreter, in a directory
holding a real trace under the name they use.  The capture snippet runs as
written inside a small training script that defines the two names it leaves
to the reader (``loader`` and ``train_step``), with torch on the CPU.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kinetolens
from tests.conftest import trace_path

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)
CAPTURE = [b for b in BLOCKS if "kinetolens.profile(" in b]
ANALYSIS = [b for b in BLOCKS if b not in CAPTURE]
#: The file name the snippets load; a real trace of that name.
TRACE = "kineto_legacy/resnet50_num_workers_0_2020-12/worker0.pt.trace.json.gz"

HARNESS = '''
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = [(torch.randn(16, 32), torch.randint(0, 8, (16,))) for _ in range(10)]


def train_step(batch):
    x, y = batch
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()


'''


def test_readme_has_the_snippets_this_test_runs() -> None:
    assert len(ANALYSIS) >= 2 and len(CAPTURE) == 1
    assert any("to_pandas()" in b for b in ANALYSIS)


def test_analysis_snippets_run_as_written(tmp_path: Path) -> None:
    shutil.copy(trace_path(TRACE), tmp_path / Path(TRACE).name)
    script = tmp_path / "snippets.py"
    script.write_text("\n\n".join(ANALYSIS))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]


def test_capture_snippet_runs_as_written(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # capture is the only part that needs it
    script = tmp_path / "train.py"
    script.write_text(HARNESS + textwrap.dedent(CAPTURE[0]))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    traces = sorted((tmp_path / "kinetolens-runs").rglob("*.pt.trace.json*"))
    assert traces, sorted(p.name for p in tmp_path.rglob("*"))
    assert kinetolens.load(traces[0], cache=False).steps.height == 5  # steps=5, after the warmup


def test_the_pandas_extra_installs_what_to_pandas_needs() -> None:
    # The README documents `t.kernels.to_pandas()`: polars needs pandas and
    # pyarrow for it, which no extra used to install.
    import tomllib

    project = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]
    extras = {name: {re.split(r"[<>=!~ \[]", d)[0] for d in deps} for name, deps in project["optional-dependencies"].items()}
    assert {"pandas", "pyarrow"} <= extras["pandas"]
    assert {"pandas", "pyarrow"} <= extras["test"]  # so that the snippet runs in CI


def test_readme_states_the_unit_step_breakdown_returns() -> None:
    """The README said µs while step_breakdown returns the model's nanoseconds: each step's total
    is within 10% of its ProfilerStep range's duration in ns (the window also holds the step's
    GPU tail, as torch-tb-profiler's; µs would be 1,000 times smaller)."""
    from kinetolens.analysis.gputime.overview import step_breakdown

    line = next(x for x in README.read_text().splitlines() if x.startswith("step_breakdown(t)"))
    assert "nanoseconds" in line, line
    trace = kinetolens.load(trace_path("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"))
    ranges = trace.ops.filter(trace.ops["name"].str.starts_with("ProfilerStep#")).select("step", "dur")
    both = step_breakdown(trace).join(ranges, on="step")
    assert both.height == ranges.height == 6
    for total, dur in both.select("total", "dur").iter_rows():
        assert abs(total - dur) <= 0.1 * dur, (total, dur)
