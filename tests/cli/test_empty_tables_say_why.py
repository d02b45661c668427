"""A command with nothing to show says why in one line instead of printing an empty table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import trace_path
from tests.terminal import run_cli, run_many

RESOLVER = "hta/df_index_resolver/df_index_resolver.json.gz"  # no input shapes, no modules, no call sites
CLOVERLEAF = "nsys/pipit_perlmutter-cloverleaf-cuda.sqlite"  # Nsight export without NVTX: no ops
CPU = "hta/rank_non_gpu/rank_non_gpu.json.gz"  # ops, no GPU


def _one_line(proc, *words: str) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == "", proc.stdout  # no header-only table
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("rel", "words"),
    [(RESOLVER, ("no op has a FLOP count", "record_shapes=True")), (CLOVERLEAF, ("no CPU ops", "NVTX"))],
)
def test_roofline_without_rows_says_why_and_writes_no_chart(rel: str, words: tuple[str, ...], tmp_path: Path) -> None:
    chart = tmp_path / "r.html"
    proc = run_cli("roofline", str(trace_path(rel)), "-o", str(chart))
    _one_line(proc, rel.split("/")[-1], *words)
    assert not chart.exists()


def test_ops_variants_without_rows_say_why() -> None:
    nsys, resolver = str(trace_path(CLOVERLEAF)), str(trace_path(RESOLVER))
    procs = run_many({
        "ops": (("ops", nsys), 80),
        "tree": (("ops", nsys, "--tree"), 80),
        "inclusive": (("ops", nsys, "--inclusive"), 120),
        "module-nsys": (("ops", nsys, "--aggregate-by", "module"), 80),
        "annotations": (("ops", nsys, "--annotations"), 80),
        "module": (("ops", resolver, "--aggregate-by", "module"), 80),
        "source": (("ops", resolver, "--aggregate-by", "source"), 80),
    })  # fmt: skip
    for name in ("ops", "tree", "inclusive", "module-nsys"):
        _one_line(procs[name], "no CPU ops", "NVTX")
    _one_line(procs["annotations"], "no annotations")
    _one_line(procs["module"], "no nn.Module paths", "with_modules=True")
    _one_line(procs["source"], "no call sites", "with_stack=True")


def test_ops_tree_of_a_cpu_trace_has_no_device_columns() -> None:
    proc = run_cli("ops", str(trace_path(CPU)), "--tree", columns=120)
    assert proc.returncode == 0, proc.stderr
    assert "aten::linear" in proc.stdout
    assert "device" not in proc.stdout and "host" in proc.stdout, proc.stdout
