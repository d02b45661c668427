"""Option values that cannot give a meaningful table: one line, exit 2.

a regex that does not parse printed a polars traceback;
``demo --device cuda`` on a CPU-only torch a torch traceback; ``-t 0``, a
step the trace does not have, or a trace without kernels printed an empty
table (or nothing at all, for ``-w 0``) and exited 0.  Every command with
such options is run here as a user runs it, in a real subprocess; the runs
start together (process start-up dominates).
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TRACES = SHARED / "traces"
BERT = str(TRACES / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz")
CPU_ONLY = str(TRACES / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")

pytestmark = pytest.mark.skipif(not Path(BERT).exists(), reason=f"real traces not found under {TRACES}")

#: name -> (arguments, words the one error line must hold)
REFUSED: dict[str, tuple[list[str], list[str]]] = {
    "ops-bad-regex": (["ops", "--name", "[", BERT], ["--name", "'['", "not a valid regular expression"]),
    "ops-top-0": (["ops", "-t", "0", BERT], ["--top", "0"]),
    "ops-top-negative": (["ops", "-t", "-1", BERT], ["--top", "-1"]),
    "ops-no-such-step": (["ops", "--step", "99", BERT], ["--step", "no step 99", BERT, "only step is 6"]),
    "ops-min-above-max": (["ops", "--min-time", "100", "--max-time", "1", BERT], ["--min-time", "--max-time"]),
    "ops-width-0": (["ops", "-w", "0", BERT], ["--width", "0"]),
    "kernels-no-such-step": (["kernels", "--step", "99", BERT], ["--step", "no step 99"]),
    "kernels-limit-0": (["kernels", "-n", "0", BERT], ["--limit", "0"]),
    # head(-1) silently dropped the last row.
    "kernels-limit-negative": (["kernels", "-n", "-1", BERT], ["--limit", "-1"]),
    "kernels-width-0": (["kernels", "-w", "0", BERT], ["--width"]),
    "kernels-cpu-only": (["kernels", CPU_ONLY], [CPU_ONLY, "no GPU kernels"]),
    "memory-top-0": (["memory", "-t", "0", BERT], ["--top", "0"]),
    "roofline-width-0": (["roofline", "-w", "0", BERT], ["--width"]),
    "diff-width-0": (["diff", "-w", "0", BERT, BERT], ["--width"]),
    "idle-negative-wait": (["idle", "--kernel-wait-us", "-1", BERT], ["--kernel-wait-us"]),
    "launches-negative-short": (["launches", "--short-us", "-1", BERT], ["--short-us"]),
    "missing-argument": (["ops"], ["TRACE", "kinetolens ops -h"]),
}


def _cuda_usable() -> bool:
    import torch

    return torch.cuda.is_available()


def run_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="120", POLARS_MAX_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, timeout=300, env=env
    )


@pytest.fixture(scope="module")
def refused() -> dict[str, subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(REFUSED, pool.map(lambda key: run_cli(REFUSED[key][0]), REFUSED)))


def assert_one_line(proc: subprocess.CompletedProcess[str], words: list[str]) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stdout == "", proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kinetolens: error: "), proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


@pytest.mark.parametrize("key", list(REFUSED))
def test_refused_with_one_line(key: str, refused: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert_one_line(refused[key], REFUSED[key][1])


@pytest.mark.skipif(_cuda_usable(), reason="torch can use CUDA here")
def test_demo_on_cuda_without_cuda(tmp_path: Path) -> None:
    proc = run_cli(["demo", "--device", "cuda", "--logdir", str(tmp_path)])
    assert_one_line(proc, ["--device", "cuda", "CUDA"])
    assert not any(tmp_path.iterdir())  # refused before any work


def test_valid_values_still_work() -> None:
    proc = run_cli(["ops", "--step", "6", "--name", "aten::(mm|addmm)", "-t", "2", "--csv", BERT])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("name,") and len(proc.stdout.splitlines()) >= 2
