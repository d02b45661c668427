"""Output paths and the dashboard's port: fail in one line, or just work.

``serve`` on a busy port printed its banner and then
uvicorn's error, exiting 1; ``export --format perfetto -o newdir/t.json.gz``
refused a folder the table exports create (so did ``report -o``,
``roofline -o`` and ``memory --svg``); ``memory --svg`` on a trace that
cannot be drawn printed nothing but the error.  Every case runs the real CLI.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TRACES = SHARED / "traces"
BERT = TRACES / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
NO_ADDRESSES = TRACES / "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RAW_TIMELINE = TRACES / "hta/memory_analysis/memory_timeline.raw.gz"
CPU_ONLY = TRACES / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"

pytestmark = pytest.mark.skipif(
    not all(p.exists() for p in (BERT, NO_ADDRESSES, RAW_TIMELINE, CPU_ONLY)), reason=f"real traces not found under {TRACES}"
)


def run_cli(*args: str, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="120", POLARS_MAX_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kinetolens: error: "), proc.stderr
    return lines[0]


def test_serve_on_a_busy_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = run_cli("serve", "--logdir", str(tmp_path), "--port", str(port), timeout=60)
    line = one_error_line(proc)
    assert f"127.0.0.1:{port}" in line and "in use" in line, line
    assert proc.stdout == ""  # no banner, no dashboard address


def test_every_output_path_gets_its_folder(tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper"
    runs = {
        out / "perfetto" / "t.json.gz": ("export", str(BERT), "--format", "perfetto", "-o"),
        out / "tables": ("export", str(BERT), "--format", "csv", "-o"),
        out / "report" / "r.html": ("report", str(BERT), "-o"),
        out / "md" / "r.md": ("report", str(BERT), "--format", "md", "-o"),
        out / "roofline" / "chart.html": ("roofline", str(BERT), "-o"),
        out / "memory" / "flow.svg": ("memory", str(BERT), "--svg"),
    }
    for target, args in runs.items():
        proc = run_cli(*args, str(target))
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert target.exists(), args
    doc = json.loads(gzip.decompress((out / "perfetto" / "t.json.gz").read_bytes()))
    assert len(doc["traceEvents"]) > 0
    assert (out / "tables" / "kernels.csv").exists()
    assert (out / "memory" / "flow.svg").read_text().startswith("<svg")


@pytest.mark.parametrize(
    ("trace", "shown"),
    [(NO_ADDRESSES, "memory peaks"), (RAW_TIMELINE, "torch memory timeline")],
    ids=["events-without-addresses", "raw-memory-timeline"],
)
def test_memory_svg_that_cannot_be_drawn_still_prints_the_tables(tmp_path: Path, trace: Path, shown: str) -> None:
    svg = tmp_path / "flow.svg"
    proc = run_cli("memory", str(trace), "--svg", str(svg))
    line = one_error_line(proc)
    assert "no memory-flow picture" in line and str(svg) in line, line
    assert shown in proc.stdout  # the same tables as without --svg
    assert proc.stdout == run_cli("memory", str(trace)).stdout
    assert not svg.exists()


def test_memory_svg_of_a_trace_without_memory_events(tmp_path: Path) -> None:
    proc = run_cli("memory", str(CPU_ONLY), "--svg", str(tmp_path / "flow.svg"))
    line = one_error_line(proc)
    assert "has no [memory] events to draw" in line and str(CPU_ONLY) in line, line
    assert proc.stdout == ""  # nothing about memory to show
