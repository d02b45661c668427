"""``kinetolens ops`` of a trace read a step window at a time.

From 1.5 GB of JSON (or with ``--windows``) the op, op+shape and kernel
tables are merged from each step window's own ops and kernels
(:func:`kinetolens.runs.windowed_read.ops_in_windows`), so memory holds a
step; they are the whole trace's table under every aggregate.  What needs
the trace whole (--step, --tree, --annotations, module and source groupings,
the time lost to the roofline) reads it whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kinetolens.analysis.hardware.roofline import LOST_COLUMNS
from kinetolens.cli.main import cli
from tests.cli.kinetolens_process import kinetolens
from tests.conftest import trace_path

DF_INDEX = "hta/df_index_resolver/df_index_resolver.json.gz"
CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
NO_STEPS = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


def _ops(path: Path, *options: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["ops", str(path), "--no-cache", *options], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _rows(path: Path, *options: str) -> list[dict]:
    code, out, err = _ops(path, "--json", "-t", "100000", *options)
    assert code == 0, err
    rows = json.loads(out)
    return [{k: v for k, v in r.items() if k not in LOST_COLUMNS} for r in rows]


def _same(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want) > 0
    key = lambda r: json.dumps({k: r[k] for k in ("name", "shapes") if k in r}, sort_keys=True)  # noqa: E731
    by_key = {key(r): r for r in want}
    for row in got:
        expected = by_key[key(row)]
        assert row.keys() == expected.keys()
        for k, v in row.items():
            if k == "cumulative":  # a running total follows the order, which ties may swap
                continue
            if isinstance(v, float):
                assert v == pytest.approx(expected[k], rel=1e-9, abs=1e-9), (key(row), k)
            else:
                assert v == expected[k], (key(row), k)


@pytest.mark.parametrize(
    ("rel", "options"),
    [
        (DF_INDEX, ()),
        (DF_INDEX, ("--aggregate-by", "op+shape", "--aggregate", "mean")),
        (DF_INDEX, ("--aggregate", "max", "--inclusive")),
        (DF_INDEX, ("--aggregate-by", "kernel", "--aggregate", "min")),
        (DF_INDEX, ("--aggregate", "count")),
        (CPU_ONLY, ()),  # no GPU: host time ranks
    ],
    ids=["op-sum", "op+shape-mean", "op-max-inclusive", "kernel-min", "op-count", "cpu-only"],
)
def test_the_windowed_table_is_the_whole_traces(rel: str, options: tuple[str, ...]) -> None:
    path = trace_path(rel)
    _same(_rows(path, "--windows", *options), _rows(path, "--whole", *options))


def test_many_steps_in_windows(many_steps: Path) -> None:
    _same(_rows(many_steps, "--windows"), _rows(many_steps, "--whole"))
    code, out, _ = _ops(many_steps, "--windows", "-w", "100")
    assert code == 0
    text = " ".join(out.split())
    assert "read a step window at a time (14 steps)" in text
    assert max(len(line) for line in out.splitlines()) <= 100


def test_a_small_trace_is_read_whole_by_default() -> None:
    code, out, _ = _ops(trace_path(DF_INDEX), "-w", "120")
    assert code == 0 and "read a step window" not in out and "kernel time in the table" in " ".join(out.split())


@pytest.mark.parametrize("options", [("--tree",), ("--annotations",), ("--step", "1"), ("--aggregate-by", "module")])
def test_windows_refuses_what_needs_the_whole_trace_in_one_line(options: tuple[str, ...]) -> None:
    err = _refused(trace_path(DF_INDEX), "--windows", *options)
    assert "--windows" in err and "op, op+shape and kernel tables" in err


def test_lost_time_needs_the_whole_trace() -> None:
    assert "--whole" in _refused(trace_path(DF_INDEX), "--windows", "--order-by", "lost_us")


def _refused(path: Path, *options: str) -> str:
    """The one line ``kinetolens ops`` exits 2 with."""
    res = kinetolens("ops", path, *options)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("kinetolens: error: "), res.stderr
    return lines[0]


def test_a_trace_without_steps_is_read_whole_and_says_why() -> None:
    code, out, err = _ops(trace_path(NO_STEPS), "--windows", "-w", "120")
    assert code == 0 and "no ProfilerStep ranges" in err and "read whole" in err
    assert "read a step window" not in out


def test_numbered_graph_replays_are_read_whole_for_op_tables() -> None:
    # hta/trace_diff/test replays CUDA graphs whose ids the trace did not record:
    # kinetolens numbers them across the whole trace (a replay under no op is
    # named by its graph), so the op tables read it whole; kernel names do not
    # depend on the numbers, and the kernel table still reads in windows.
    path = trace_path("hta/trace_diff/test/test.json.gz")
    code, _, err = _ops(path, "--windows", "--json")
    assert code == 0 and "read whole" in err and "numbers its CUDA/HIP graph replays" in err
    code, out, err = _ops(path, "--windows", "--aggregate-by", "kernel", "-w", "120")
    assert code == 0 and "read whole" not in err and "read a step window at a time" in " ".join(out.split())
