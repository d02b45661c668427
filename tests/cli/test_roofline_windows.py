"""``kinetolens roofline`` of a trace read a step window at a time.

From 1.5 GB of JSON (or with ``--windows``) each window gives its own op
calls on the roofline (those starting in it, with the kernels they
launched) and its forward calls per module
(:func:`kinetolens.runs.windowed_read.roofline_in_windows`); the tables by
op and by module are grouped from them by the code that groups a trace read
whole, so they are the whole trace's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.kinetolens_process import kinetolens
from tests.cli.same_rows import invoked, json_rows, same_rows
from tests.conftest import QWEN_H100, trace_path

QWEN_MI300 = "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
#: A V100 training trace without a FLOP formula's op: nothing to put on a roofline.
NO_WORK = "hta/df_index_resolver/df_index_resolver.json.gz"


def _roofline(path: Path, *options: str) -> tuple[int, str, str]:
    return invoked("roofline", path, *options)


def _rows(path: Path, *options: str) -> list[dict]:
    return json_rows("roofline", path, *options)


@pytest.mark.parametrize(("by", "keys"), [("op", ("op",)), ("module", ("module",))])
def test_five_steps_give_the_whole_tables(qwen_steps: Path, by: str, keys: tuple[str, ...]) -> None:
    whole = _rows(qwen_steps, "--by", by, "--whole")
    same_rows(_rows(qwen_steps, "--by", by, "--windows"), whole, keys)
    if by == "module":  # forward calls, summed over the windows: once per step
        assert next(r for r in whole if r["module"] == "Qwen2Model_0")["calls"] == 5


@pytest.mark.parametrize("rel", [QWEN_H100, QWEN_MI300])
def test_one_step_traces_give_the_whole_tables(rel: str) -> None:
    for by, keys in (("op", ("op",)), ("module", ("module",))):
        same_rows(_rows(trace_path(rel), "--by", by, "--windows"), _rows(trace_path(rel), "--by", by, "--whole"), keys)


def test_the_terminal_says_how_it_was_read_and_the_same_totals(qwen_steps: Path) -> None:
    code, out, err = _roofline(qwen_steps, "--windows", "-w", "120")
    assert code == 0, err
    _, whole, _ = _roofline(qwen_steps, "--whole", "-w", "120")
    assert out.rstrip().endswith("read a step window at a time (5 steps)")
    total = lambda text: next(line for line in text.splitlines() if "Ops with a roofline" in line)  # noqa: E731
    assert total(out) == total(whole)


def test_a_user_peak_reaches_every_window(qwen_steps: Path) -> None:
    # The spec (with --peak-tflops) is asked of the first window and used for all.
    low = _rows(qwen_steps, "--windows", "--peak-tflops", "100")
    same_rows(low, _rows(qwen_steps, "--whole", "--peak-tflops", "100"), ("op",))
    assert sum(r["lost_us"] for r in low) != pytest.approx(sum(r["lost_us"] for r in _rows(qwen_steps, "--windows")))


def test_nothing_on_a_roofline_is_one_line_either_way() -> None:
    for how in ("--windows", "--whole"):
        proc = kinetolens("roofline", trace_path(NO_WORK), how)
        assert proc.returncode == 2 and proc.stdout == "", how
        assert proc.stderr.count("\n") == 1 and "nothing to put on a roofline: no op has a FLOP count" in proc.stderr, how


@pytest.mark.parametrize("rel", [QWEN_H100, QWEN_MI300])
def test_a_window_split_anywhere_gives_the_whole_tables(rel: str) -> None:
    # Adjacent windows share the instants at their edges and a step's late
    # kernels run into the next window: each part must hold only the op calls
    # starting in it.  One trace cut in two at three instants, each half taken
    # from the whole trace: a call in both halves would count twice.
    import polars as pl

    import kinetolens
    from kinetolens.analysis.hardware.gpu_spec import gpu_spec
    from kinetolens.analysis.hardware.roofline import own_op_roofline, roofline_by, roofline_of
    from kinetolens.analysis.workload.modules import module_calls
    from kinetolens.model.earlier_launches import without_earlier_iteration

    trace = kinetolens.load(trace_path(rel), cache=False)
    spec = gpu_spec(trace)
    bare = without_earlier_iteration(trace)
    lo, hi = int(bare.ops["ts"].min()), int((bare.ops["ts"] + bare.ops["dur"]).max()) + 1
    starts = bare.ops["ts"].sort()
    for cut in (int(starts[starts.len() // 3]), int(starts[starts.len() // 2]) + 1, int(bare.steps["ts"][0]) + 1):
        halves = [(lo, cut), (cut, hi)]
        ops = pl.concat([own_op_roofline(bare, spec, own) for own in halves])
        calls = pl.concat([module_calls(bare, own=own) for own in halves]).group_by("module").agg(pl.col("calls").sum())
        for by, key in (("op", "op"), ("module", "module")):
            got, want = roofline_of(ops, spec, by, calls).sort(key), roofline_by(trace, spec, by).sort(key)
            assert got[key].to_list() == want[key].to_list()
            for c in want.columns:
                if want[c].dtype.is_float():
                    assert got[c].fill_null(-1.0).to_list() == pytest.approx(want[c].fill_null(-1.0).to_list(), rel=1e-9, abs=1e-9), c
                else:
                    assert got[c].to_list() == want[c].to_list(), c
