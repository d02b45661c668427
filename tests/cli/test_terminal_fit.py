"""What a user's terminal shows at 80 and 120 columns, and through a pipe:
headings cut paths in the middle, table cells never fold mid-word, one time
unit per table, no trailing padding."""

from __future__ import annotations

import re

import pytest

from kinetolens.views import units
from tests.conftest import trace_path
from tests.terminal import run_cli, run_many

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"


@pytest.mark.parametrize("columns", [80, 120])
def test_roofline_rows_keep_their_names_on_one_line(columns: int) -> None:
    procs = run_many({rel: (("roofline", str(trace_path(rel)), "-n", "8"), columns) for rel in (QWEN, RESNET)})
    for rel, proc in procs.items():
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert all(len(line) <= columns for line in lines), proc.stdout
        rows = [line for line in lines if line.startswith("│")]
        assert len(rows) == 8, proc.stdout  # one line per op: no name folded onto a second
        assert all(re.match(r"│ aten::\S+ +│", row) for row in rows), rows
        assert not re.search(r"\d\.0 us|us on the GPU", proc.stdout), proc.stdout  # durations in their unit
        assert re.search(r"\b\d{1,3},\d{3}\b", next(r for r in rows)) or "ms" in proc.stdout  # thousands separated


@pytest.mark.parametrize("columns", [80, 120])
def test_roofline_of_short_names_fits_and_keeps_numbers_with_their_units(columns: int) -> None:
    # Three short op names leave room for more columns: the key column's
    # floor must be counted when choosing them, or the table passes the width.
    proc = run_cli("roofline", str(trace_path(QWEN)), "-n", "3", columns=columns)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= columns for line in lines), proc.stdout
    assert not any(re.search(r"\d$", line) and re.match(r"(us|ms|s) ", after) for line, after in zip(lines, lines[1:])), proc.stdout


def test_roofline_times_in_ms_when_they_are_big() -> None:
    proc = run_cli("roofline", str(trace_path(RESNET)), "-n", "3", columns=120)
    header = "\n".join(proc.stdout.splitlines()[1:6])
    assert " ms " in header and " us " not in header, proc.stdout
    assert "Ops with a roofline: 598\u00a0ms on the GPU" in proc.stdout


@pytest.mark.parametrize("columns", [80, 120])
def test_memory_heading_cuts_the_path_instead_of_folding_it(columns: int) -> None:
    path = str(trace_path(BERT))
    proc = run_cli("memory", path, columns=columns)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= columns for line in lines)
    heading = proc.stdout.split("\n\n", 1)[0].splitlines()
    assert heading[0].startswith("memory peaks") and len(heading) <= 2, heading
    shown = heading[-1].split(" ")[-1]  # the path: whole on its line, or cut in the middle, never folded
    head, cut, tail = shown.partition(units.ELLIPSIS)
    assert (shown == path) or (cut and path.startswith(head) and path.endswith(tail)), heading


def test_piped_summary_has_no_trailing_spaces() -> None:
    proc = run_cli("summary", str(trace_path(BERT)), columns=None)
    assert proc.returncode == 0, proc.stderr
    padded = [line for line in proc.stdout.splitlines() if line != line.rstrip()]
    assert not padded, padded[:3]
