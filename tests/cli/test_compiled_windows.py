"""``kinetolens compiled`` of a trace read a step window at a time.

From 1.5 GB of JSON (or with ``--windows``) each window sums the calls of
the generated kernels it owns (C++ kernels' ranges by their start, Triton
kernels by their launch) and the windows' sums are added: the table must be
the whole read's, calls, times, FLOPs and bytes per call, fused ops and
modules from the capture's records.  The trace: the compiled CPU model's
capture (tests/compiled_model.py) with its step repeated by bench/gen_trace.py,
its run metadata (the inductor records) beside it.
"""

from __future__ import annotations

import gzip
import json
import runpy
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kinetolens.cli.main import cli
from kinetolens.formats import metadata_name

ROOT = Path(__file__).resolve().parents[2]
STEPS = 4


@pytest.fixture(scope="module")
def compiled_steps(compiled: tuple[Any, dict[str, Any], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, _, source = compiled
    with gzip.open(source) as f:
        mb = len(f.read()) / 1e6
    out = tmp_path_factory.mktemp("compiled_steps") / "compiled_steps.json"
    gen = runpy.run_path(str(ROOT / "bench" / "gen_trace.py"))
    gen["main"](["--source", str(source), "--size-mb", f"{STEPS * mb:.3f}", "-o", str(out)])
    shutil.copy(source.with_name(metadata_name(source.name)), out.with_name(metadata_name(out.name)))
    return out


def _table(path: Path, *options: str) -> tuple[list[dict], str]:
    result = CliRunner().invoke(cli, ["compiled", str(path), "--no-cache", "--json", *options], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), result.stderr


def test_windows_give_the_whole_table(compiled_steps: Path, compiled: tuple[Any, dict[str, Any], Path]) -> None:
    whole, _ = _table(compiled_steps, "--whole")
    windowed, notes = _table(compiled_steps, "--windows")
    assert "read a step window at a time" in notes
    assert windowed == whole
    one, _ = _table(compiled[2], "--whole")
    once = {(r["name"], r["dir"]): r for r in one}
    rows = {(r["name"], r["dir"]): r for r in whole}
    # Each kernel ran once a step in every copy of the step: its calls add up, its work per call does not change.
    copies = {rows[k]["calls"] // once[k]["calls"] for k in once}
    assert len(copies) == 1 and copies.pop() >= STEPS - 1
    assert all(rows[k]["flops"] == once[k]["flops"] and rows[k]["fused_ops"] == once[k]["fused_ops"] for k in once)
    assert {r["provenance"] for r in whole} == {"inductor"}  # the records beside the trace were read in every window
