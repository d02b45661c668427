"""Tables read as words with one time unit: no column identifiers, no raw
values (cpu_exec, True), no 0.00 ms savings, no ms beside us."""

from __future__ import annotations

import re

import polars as pl

import kinetolens
from kinetolens.views import units
from kinetolens.views.report_data import collect
from kinetolens.views.report_md import render_md
from tests.conftest import trace_path
from tests.terminal import run_many

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
B200 = "tracelens/b200/eager_trace.json.gz"


def test_a_saving_that_rounds_to_zero_is_not_0_00_ms() -> None:
    assert units.saving_ms(0.001) == "< 0.01 ms"
    assert units.saving_ms(0.0) == "< 0.01 ms"
    assert units.saving_ms(1234.5) == "1,234.50 ms"


def test_display_reads_words_in_one_time_unit() -> None:
    frame = pl.DataFrame({
        "category": ["cpu_exec", "kernel"], "mean_per_step_ms": [1.5, 30.2], "self_us": [12.0, 800.0],
        "share_pct": [3.0, 60.0], "straggler": [True, False], "basis": ["window_sum", "allocator"],
    })  # fmt: skip
    columns, rows = units.display(frame, frame)
    labels = [c["label"] for c in columns]
    assert labels == ["category", "mean per step (ms)", "self (ms)", "share (%)", "straggler", "basis"]
    assert rows[0] == ["CPU", "1.500", "0.012", "3.0%", "yes", "window"]
    assert rows[1][4] == "no"


def test_report_headers_are_words() -> None:
    md = render_md(collect(kinetolens.load(trace_path(QWEN))))
    heads = [line for line, nxt in zip(md.splitlines(), md.splitlines()[1:]) if nxt.startswith(("| :--", "| ---"))]
    assert heads
    assert not [h for h in heads if "_" in h], heads
    assert "| category | mean per step (ms) | % of step |" in md
    for head in heads:
        assert len(set(re.findall(r"\((us|ms|s)\)", head))) <= 1, head  # one time unit per table


def test_ops_title_in_words_and_one_unit_per_table() -> None:
    procs = run_many({c: (("ops", str(trace_path(B200)), "-t", "5"), c) for c in (80, 120)})
    for columns, proc in procs.items():
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0] == "top 5 ops by GPU self time", lines[0]
        header = " ".join(lines[1:3])
        assert not (" ms" in header and " us" in header), header
        assert all(len(line) <= columns for line in lines)
