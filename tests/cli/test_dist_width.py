"""``kinetolens dist`` piped uses the shared width rule: full width, no wrap at 80."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import trace_path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gen_ranks import generate  # noqa: E402

SOURCE = "hta/trace_filter/sampled_rank-0.json.gz"


def test_dist_piped_is_not_wrapped_at_80_columns(tmp_path: Path) -> None:
    # `kinetolens dist RUNDIR | cat` wrapped at rich's default 80 columns
    generate(trace_path(SOURCE), tmp_path, 4, 2, keep_every=8, seed=1)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    run = subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "dist", str(tmp_path), "--no-cache", "--executor", "local:1"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    # headers and cells whole: no column squeezed to 80 columns and cut ("colle…", "850,2…")
    assert "…" not in run.stdout, run.stdout
    header = [line.split() for line in lines if "collective" in line.split()]
    assert header and header[0] == ["collective", "kind", "calls", "bytes", "time", "sync", "transfer", "algbw", "busbw"]
    # the straggler finding's evidence is one line, not folded at 80, and not padded to the unlimited width
    evidence = [line for line in lines if "reaches each step's collectives" in line]
    assert evidence and 80 < len(evidence[0]) < 1000 and "(median)" in evidence[0], run.stdout
