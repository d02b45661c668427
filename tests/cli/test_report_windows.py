"""``kinetolens report`` of a trace read a step window at a time: whole-trace tables, and says what it sampled.

From 1.5 GB of JSON the report reads the trace as the summary does, one
step window at a time (:mod:`kinetolens.runs.windowed_read`).  Its op
and kernel tables and Tensor Core split are merged from each window's own
ops (by start) and kernels (by launch: a kernel keeps its op, whose FLOPs
are split over all its kernels), so they equal the whole trace's
(:mod:`kinetolens.analysis.report_windows`); the sections of the sample of
whole steps say so under their titles.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

import kinetolens
import kinetolens.runs.window_choice as window_choice
import kinetolens.runs.windowed_read as windowed_read
from kinetolens.analysis.hardware.kernels import kernel_verdicts, tensor_core_time
from kinetolens.analysis.report_windows import tables_part, whole_tables
from kinetolens.analysis.workload.ops import op_stats
from kinetolens.cli.main import cli
from kinetolens.windowed import open_windows
from tests.conftest import trace_path
from tests.load.test_windowed import WITH_STEPS


def _sorted(table: pl.DataFrame) -> pl.DataFrame:
    return table.sort(table.columns, nulls_last=True)


def _same_tables(path: Path, directory: Path) -> None:
    whole = kinetolens.load(path, cache=False, capture=False)
    windowed = open_windows(path, directory)
    parts = [tables_part(trace, window.own, windowed.has_gpu_work()) for window, trace in windowed.traces()]
    gpus = whole.kernels["device"].drop_nulls().n_unique()
    tables = whole_tables(parts, steps=windowed.steps, gpus=gpus, breakdown=pl.DataFrame())
    assert len(parts) == whole.steps.height
    for got, expected in [
        (tables.ops, op_stats(whole)),
        (tables.kernels, op_stats(whole, by="kernel")),
        (tensor_core_time(tables.kernel_verdicts), tensor_core_time(kernel_verdicts(whole))),
    ]:
        assert got.height == expected.height > 0 or whole.kernels.height == 0
        assert_frame_equal(_sorted(got), _sorted(expected), check_exact=False, rel_tol=1e-9)


@pytest.mark.parametrize("rel", WITH_STEPS, ids=[Path(r).parent.name for r in WITH_STEPS])
def test_op_and_kernel_tables_from_windows_equal_the_whole_traces(rel: str, tmp_path: Path) -> None:
    # resnet50 fails with kernels owned by their start: a kernel running in
    # the next step's window lost its op's other kernels, and its FLOPs share.
    _same_tables(trace_path(rel), tmp_path)


def test_tables_of_many_steps_in_many_parts_equal_the_whole_traces(
    many_steps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kinetolens.ingest import spill

    monkeypatch.setattr(spill, "PART_BYTES", 1 << 20)
    _same_tables(many_steps, tmp_path)


def _report(path: Path, *options: str) -> str:
    result = CliRunner().invoke(cli, ["report", *options, "--format", "md", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def _section(md: str, title: str) -> str:
    return md.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_a_long_trace_is_reported_whole_where_it_adds_up_and_says_what_it_sampled(many_steps: Path) -> None:
    whole, windowed = _report(many_steps, "--whole"), _report(many_steps, "--windows")
    assert "read a step window" not in whole and "Of steps" not in whole
    ids = kinetolens.load(many_steps, cache=False).steps["step"].to_list()
    sample = f"steps {ids[3]}-{ids[10]} (8 of 14 whole steps)"
    assert f"| read | a step window at a time (14 steps): the program's kind and the recommendations are from {sample} |" in windowed
    # Summed over every step: the same as the whole trace's.
    for title in ("Top ops", "Top kernels"):
        assert _section(windowed, title) == _section(whole, title), title
    assert _section(windowed, "Overview").split("\n### Step time")[1] == _section(whole, "Overview").split("\n### Step time")[1]
    # Of the sample: said under the section's title.
    line = f"_Of {sample}: the trace was read a step window at a time, and this section is of those steps._"
    for title in ("Critical path", "GPU idle time"):
        assert line in _section(windowed, title), title
    # the trace has no modules, source lines, GPU name or memory events: those sections are left out
    assert windowed.count(line) == 2


def test_a_sample_of_one_step_is_named_in_the_singular() -> None:
    md = _report(trace_path("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"), "--windows", "--no-cache")
    assert "| read | a step window at a time (1 step): the program's kind and the recommendations are from step 6 (1 of 1 whole step) |" in md
    assert "_Of step 6 (1 of 1 whole step): the trace was read a step window at a time" in md


def test_the_default_reports_a_large_file_in_windows_and_keeps_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = trace_path("hta/nccl_parser_config/nccl_data.json.gz")
    monkeypatch.setenv("KINETOLENS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(window_choice, "WINDOWED_FROM_BYTES", 1)
    assert "| read | a step window at a time (3 steps)" in _report(path)
    # The summary the report computed is kept: a summary after it opens no window.
    monkeypatch.setattr(windowed_read, "open_windows", None)
    result = CliRunner().invoke(cli, ["summary", "--json", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert '"read_in_windows": "read a step window at a time (3 steps)' in result.stdout


@pytest.mark.parametrize("command", ["report", "summary"])
def test_a_trace_without_steps_is_read_whole_and_says_why(command: str) -> None:
    path = trace_path("tracelens/b200/eager_trace.json.gz")
    result = CliRunner().invoke(cli, [command, "--windows", "--no-cache", str(path)] + (["--format", "md"] if command == "report" else []))
    assert result.exit_code == 0, result.output
    assert "read a step window" not in result.stdout
    assert result.stderr.strip().endswith("read whole, not a step window at a time: it has no ProfilerStep ranges")


def test_the_report_reads_the_file_once_and_builds_each_window_once(many_steps: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One pass gives the summary and the tables: the file is decoded once,
    # each step's window built once, and the sample once.
    from kinetolens.windowed import Windowed

    opened, built = [], []
    real_open, real_load = windowed_read.open_windows, Windowed.load
    monkeypatch.setattr(windowed_read, "open_windows", lambda *a: opened.append(a) or real_open(*a))
    monkeypatch.setattr(Windowed, "load", lambda self, window: built.append(window.steps) or real_load(self, window))
    _report(many_steps, "--windows", "--no-cache")
    steps = kinetolens.load(many_steps, cache=False).steps["step"].to_list()
    assert len(opened) == 1
    assert sorted(built) == sorted([(s,) for s in steps] + [tuple(steps[3:11])])
