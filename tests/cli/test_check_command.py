"""``kinetolens check``: one line per invariant, exit 0 when all hold, 2 on bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kinetolens.analysis.invariants import INVARIANTS
from tests.conftest import TRACES, trace_path

REPO = Path(__file__).resolve().parents[2]


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "kinetolens.cli.main", "check", *args, "--no-cache"], capture_output=True, text=True, env=env)


def test_check_prints_every_invariant_and_exits_0_when_all_hold() -> None:
    proc = _check(str(trace_path("tracelens/b300/moe_05_large_capacity/moe_05_large_capacity.json.gz")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines()[1:]]
    assert [(w[0], w[1]) for w in lines] == [("ok", name) for name in INVARIANTS]


def test_check_a_run_directory_checks_each_rank(tmp_path: Path) -> None:
    proc = _check(str(TRACES / "param/dlrm_kineto"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sum(line.startswith("/") for line in proc.stdout.splitlines()) == 8


def test_check_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for target in (str(tmp_path / "missing.json"), str(bad)):
        proc = _check(target)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and target in proc.stderr


def test_check_wraps_its_reasons_to_the_terminal() -> None:
    # each invariant's reason ran on one line of up to 228 characters at 80 columns
    for columns, per_line in ((80, False), (120, False), (None, True)):
        env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", **({"COLUMNS": str(columns)} if columns else {})}
        trace = str(trace_path("tracelens/b300/moe_05_large_capacity/moe_05_large_capacity.json.gz"))
        proc = subprocess.run([sys.executable, "-m", "kinetolens.cli.main", "check", trace], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        body = proc.stdout.splitlines()[1:]
        if columns:
            assert max(len(line) for line in body) <= columns
        assert sum(line.startswith("  ok") for line in body) == len(INVARIANTS)
        assert (len(body) == len(INVARIANTS)) == per_line  # piped without COLUMNS: one line each, for grep
        words = " ".join(" ".join(body).split())
        assert all(" ".join(inv.why.split()) in words for inv in INVARIANTS.values())
