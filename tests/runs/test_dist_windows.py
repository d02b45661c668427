"""``kinetolens dist`` over ranks whose traces are read a step window at a time.

A rank's trace of 1.5 GB of JSON or more (or any, with ``--windows``) is
summarized a step window at a time
(:func:`kinetolens.runs.windowed_read.rank_summary_in_windows`): each
window gives the rows of its own steps and the collective calls that start
in it, numbered together afterwards.  The distributed view is then the one
of the ranks read whole, byte for byte, on real runs: the 8 DLRM ranks (one
step each, and repeated to four steps) and real gloo jobs run here.
"""

from __future__ import annotations

import gzip
import json
import runpy
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import kinetolens
import kinetolens.runs.window_choice as window_choice
from kinetolens.analysis.ranks.distributed import rank_summary
from kinetolens.model.ownership import PART_IDS
from kinetolens.runs import summarize_run
from kinetolens.runs.windowed_read import rank_summary_in_windows
from tests.analysis.ranks.test_pipeline import _run as pipeline_run
from tests.cli.kinetolens_process import kinetolens as run_kinetolens
from tests.conftest import trace_path
from tests.distributed.runs import DistributedRun, slow_loader_2, spawn_4  # noqa: F401 (fixtures)

DLRM = "param/dlrm_kineto"
GEN_TRACE = Path(__file__).resolve().parents[2] / "bench" / "gen_trace.py"


@pytest.fixture(scope="module")
def dlrm_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 8 DLRM ranks, each rank's one step repeated (bench/gen_trace.py: four
    times the JSON's size, four or five copies as its events encode)."""
    folder = tmp_path_factory.mktemp("dlrm_steps")
    gen = runpy.run_path(str(GEN_TRACE))
    for source in sorted(trace_path(DLRM).glob("*.json.gz")):
        size_mb = 4 * len(gzip.decompress(source.read_bytes())) / 1e6
        gen["main"](["--source", str(source), "--size-mb", f"{size_mb:.3f}", "-o", str(folder / source.name.removesuffix(".gz"))])
    return folder


def _dist(run_dir: Path, how: str) -> str:
    proc = run_kinetolens("dist", run_dir, "--json", how, "--executor", "local:1")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("run", ["dlrm", "dlrm_steps", "spawn_4", "slow_loader_2", "gpipe", "1f1b"])
def test_the_distributed_view_is_the_one_read_whole(run: str, request: pytest.FixtureRequest) -> None:
    # gpipe, 1f1b: two pipeline stages (torch.distributed.pipelining on gloo), whose
    # schedule comes from their microbatch ranges, or, in 1F1B, from their passes.
    if run == "dlrm":
        run_dir = trace_path(DLRM)
    elif run == "dlrm_steps":
        run_dir = request.getfixturevalue("dlrm_steps")
    elif run in ("gpipe", "1f1b"):
        pytest.importorskip("torch")
        run_dir = pipeline_run(request.getfixturevalue("tmp_path_factory"), run)
    else:
        run_dir = request.getfixturevalue(run).run_dir
    whole = _dist(run_dir, "--whole")
    assert json.loads(whole)["steps"], whole  # a view with steps, not an empty one
    assert _dist(run_dir, "--windows") == whole


def test_a_rank_read_in_windows_has_its_whole_summary(dlrm_steps: Path, tmp_path: Path) -> None:
    # Several windows: a call counted in two windows (or none), a step row from a
    # neighbour, or calls numbered per window would show here.
    path = sorted(dlrm_steps.glob("*.json"))[0]
    whole = rank_summary(kinetolens.load(path, cache=False))
    read = rank_summary_in_windows(path, spill_root=tmp_path)
    steps = whole.steps.height
    assert read is not None and steps >= 4
    for attr in ("steps", "breakdown", "exposure", "pipeline"):
        assert_frame_equal(getattr(read, attr), getattr(whole, attr))
    # Op ids are each window's own, made unique by the window's number; the rest is the whole read's.
    assert_frame_equal(read.calls.drop("op_id"), whole.calls.drop("op_id"))
    assert read.calls["op_id"].n_unique() == read.calls.height == 8 * steps  # 8 collectives a step
    last = whole.steps["step"].max()
    assert read.calls.filter(pl.col("step") == last)["op_id"].min() >= (steps - 1) * PART_IDS
    assert (read.cut_steps, read.uses_data_parallel, read.rank, read.device) == (whole.cut_steps, whole.uses_data_parallel, whole.rank, whole.device)


def test_a_cut_last_step_is_named_and_left_out(slow_loader_2: DistributedRun, tmp_path: Path) -> None:  # noqa: F811
    path = slow_loader_2.traces[0]
    read = rank_summary_in_windows(path, spill_root=tmp_path)
    whole = rank_summary(kinetolens.load(path, cache=False))
    assert read is not None and read.cut_steps == whole.cut_steps and len(whole.cut_steps) == 1
    assert whole.cut_steps[0] not in read.steps["step"].to_list()


def test_ranks_too_large_to_hold_are_read_in_windows_by_size(dlrm_steps: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # By size (no --windows): under a lowered threshold each rank is read a step window at a time.
    monkeypatch.setattr(window_choice, "WINDOWED_FROM_BYTES", 1)
    summaries = summarize_run(dlrm_steps, "local:1", cache=False)
    assert len(summaries) == 8
    assert all(s.calls["op_id"].max() >= PART_IDS for s in summaries)
    assert all(s.calls["op_id"].max() < PART_IDS for s in summarize_run(dlrm_steps, "local:1", cache=False, windows=False))


@pytest.mark.parametrize("run", ["dlrm_steps", "spawn_4"])
def test_a_window_split_anywhere_owns_each_call_once(run: str, request: pytest.FixtureRequest) -> None:
    # Adjacent windows share the instants at their edges, and a window holds the
    # previous step's launches: each part must keep only the calls starting in
    # it.  One rank's trace cut in two at three instants, each half taken from
    # the whole trace: a call kept by both halves would count twice.
    from kinetolens.analysis.ranks.distributed import merged_rank_summary, rank_part

    fixture = request.getfixturevalue(run)
    path = sorted(fixture.glob("*.json"))[0] if run == "dlrm_steps" else fixture.traces[0]
    trace = kinetolens.load(path, cache=False)
    whole = rank_summary(trace)
    lo, hi = int(trace.ops["ts"].min()), int((trace.ops["ts"] + trace.ops["dur"]).max()) + 1
    starts = whole.calls["host_ts"].sort()
    assert starts.len() >= 4
    for cut in (int(starts[1]), int(starts[starts.len() // 2]) + 1, int(trace.steps["ts"][1])):
        halves = merged_rank_summary([rank_part(trace, own) for own in ((lo, cut), (cut, hi))], whole.cut_steps)
        assert_frame_equal(halves.calls.drop("op_id"), whole.calls.drop("op_id"))
