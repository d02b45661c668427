"""The first five minutes (issue 18): what a performance engineer reads at a glance.

``kinetolens diff`` leads with the step-time categories that changed most;
``summary`` says which rank, world size and device a kinetolens capture ran
on; ``help(kinetolens.Trace)`` documents every table and column with units;
``kinetolens.profile`` has a real signature and says where its trace went.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kinetolens
from tests.conftest import GOLDEN, trace_path

RESNET_0 = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"  # DataLoader with 0 workers
RESNET_4 = "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"  # 4 workers, same V100 box


def _cli(*args: str, columns: int = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", *args], capture_output=True, text=True, timeout=300, env=env
    )


def _tb_avg_us(rel: str) -> dict[str, float]:
    """torch-tb-profiler's average step breakdown of a stored trace (golden/tb_plugin)."""
    name = rel.replace("/", "__") + ".json"
    return json.loads((GOLDEN / "tb_plugin" / name).read_text())["avg_costs_us"]


def test_diff_leads_with_the_step_category_that_changed() -> None:
    # issue 18, point 1: with 4 DataLoader workers the ResNet-50 step is faster because data
    # loading left the step; that must be on the first screen, before any op or kernel row.
    # The expected figures are torch-tb-profiler's step breakdowns of the two files.
    base, exp = _tb_avg_us(RESNET_0), _tb_avg_us(RESNET_4)
    data_delta_ms = (exp["DataLoader"] - base["DataLoader"]) / 1000  # -58.076
    step_delta_ms = (exp["Total"] - base["Total"]) / 1000  # -36.524
    proc = _cli("diff", str(trace_path(RESNET_0)), str(trace_path(RESNET_4)))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    first = lines[:25]
    data_rows = [line for line in first if line.split()[:2] == ["data", "loading"]]
    assert data_rows, "\n".join(first)
    assert f"{data_delta_ms:+,.3f}" in data_rows[0].split()
    headline = next(line for line in first if line.startswith("Step time"))
    assert f"{step_delta_ms:+,.3f} ms" in headline and f"data loading {data_delta_ms:+,.3f} ms" in headline
    # The step categories come before the op and kernel tables, largest change first.
    first_op = next(i for i, line in enumerate(lines) if "aten::" in line)
    assert lines.index(data_rows[0]) < first_op
    categories = [line.split()[0] for line in first if line.split()[:1] and line.split()[-1][-1:].isdigit()]
    assert categories[0] == "data"
    # ... then the ops and the kernels.
    assert any(line.lstrip().startswith("op per step") for line in lines)
    assert any(line.lstrip().startswith("kernel per step") for line in lines)


def test_diff_says_new_and_gone_everywhere() -> None:
    # issue 18, point 1: one vocabulary for rows only one side has ("new"/"gone"), in the
    # terminal, in the JSON and in the Python tables.
    args = (str(trace_path(RESNET_0)), str(trace_path(RESNET_4)))
    proc = _cli("diff", *args)
    assert proc.returncode == 0, proc.stderr
    assert "appeared" not in proc.stdout and "disappeared" not in proc.stdout
    assert " new, " in proc.stdout and " gone, " in proc.stdout
    for level in ("op", "kernel"):
        proc = _cli("diff", *args, "--json", "-l", level)
        payload = json.loads(proc.stdout)
        statuses = {r["status"] for r in payload["rows"]}
        assert statuses <= {"new", "gone", "changed", "same"} and {"new", "gone"} <= statuses, statuses
        assert set(payload["summary"]["counts"][level]) == {"new", "gone", "changed", "same"}


def test_dashboard_diff_leads_with_the_step_category() -> None:
    # issue 18, point 1, in the dashboard: the largest step change sits with the step times, and
    # the first table is the step breakdown, largest change first.
    from kinetolens.views.dashboard import compare as dashboard_compare
    from kinetolens.views.dashboard.sources import Ctx
    from kinetolens.views.dashboard.state import Loaded

    a, b = kinetolens.load(trace_path(RESNET_0)), kinetolens.load(trace_path(RESNET_4))
    ctx = Ctx(loaded=Loaded(a), step=None, args={}, other=Loaded(b))
    blocks = dashboard_compare.diff_view(ctx)
    cards = dict(next(bl for bl in blocks if bl["type"] == "cards")["items"])
    base, exp = _tb_avg_us(RESNET_0), _tb_avg_us(RESNET_4)
    assert cards["largest step change"] == f"data loading {(exp['DataLoader'] - base['DataLoader']) / 1000:+,.3f} ms"
    tables = [bl["source"] for bl in blocks if bl["type"] == "table"]
    assert tables[0] == "diff_step"
    step = dashboard_compare.SOURCES["diff_step"](ctx)
    assert step["category"].to_list()[0] == "dataloader" and step["category"].to_list()[-1] == "total"
