"""Running the same job twice: each ``kinetolens run`` writes its own run
folder (``LOGDIR/NAME/<start time>``, ``LOGDIR/NAME/latest`` pointing at the
newest), and where two runs did share a folder (a script profiling itself
with ``kinetolens.profile``, run twice) ``dist`` uses each rank's newest
trace and says so, instead of failing on "rank 0 appears twice".
Real two-rank gloo DDP jobs (tests/distributed)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from kinetolens.cli.diff_command import side_paths
from kinetolens.cli.main import main
from kinetolens.logdir import find_runs, one_run
from kinetolens.runs import summarize_run
from tests.distributed.runs import (  # noqa: F401
    RUN_NAME,
    DistributedRun,
    profile_ddp,
    rank_of,
    slow_loader_2,
    torchrun_2,
)


@pytest.fixture(scope="module")
def twice(tmp_path_factory: pytest.TempPathFactory) -> tuple[DistributedRun, DistributedRun]:
    """``kinetolens run -- torchrun ... ddp_job.py`` twice, same logdir and run name."""
    logdir = tmp_path_factory.mktemp("twice") / "runs"
    logdir.mkdir()
    return profile_ddp("torchrun", 2, logdir), profile_ddp("torchrun", 2, logdir)


def test_each_run_gets_its_own_folder(twice: tuple[DistributedRun, DistributedRun]) -> None:
    first, second = twice
    named = first.logdir / RUN_NAME
    assert first.run_dir != second.run_dir
    assert first.run_dir.parent == second.run_dir.parent == named.resolve()
    for run in twice:
        assert [rank_of(t) for t in run.traces] == [0, 1]
        assert all(t.parent == run.run_dir for t in run.traces)
    # `latest` points at the second run, by a relative link (the logdir can move)
    assert os.readlink(named / "latest") == second.run_dir.name
    assert sorted(p.name for p in named.iterdir()) == sorted([first.run_dir.name, second.run_dir.name, "latest"])
    # the logdir lists two runs, not the link as a third
    assert sorted(find_runs(first.logdir)) == sorted(
        f"{RUN_NAME}/{r.run_dir.name}" for r in twice
    )
    # the metadata names the run's own folder
    meta = json.loads(second.traces[0].with_name(
        second.traces[0].name.replace(".pt.trace.json.gz", ".kinetolens.json")).read_text())  # fmt: skip
    assert meta["run"] == second.run_dir.name


def test_dist_on_the_run_name_uses_latest(
    twice: tuple[DistributedRun, DistributedRun], capsys: pytest.CaptureFixture[str]
) -> None:
    # `kinetolens dist LOGDIR/NAME` is the newest run
    first, second = twice
    named = first.logdir / RUN_NAME
    main(["dist", str(named), "--executor", "local:1", "--no-cache", "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["run"]["ranks"] == 2
    assert f"using its latest run, {second.run_dir.name}" in captured.err
    summaries = summarize_run(named, "local:1", cache=False)
    assert [Path(s.path).parent for s in summaries] == [second.run_dir] * 2
    # commands that take "a trace or a run" agree
    assert [t.path.parent for t in one_run(named)] == [second.run_dir] * 2


def test_dist_uses_the_newest_trace_of_each_rank(
    slow_loader_2: DistributedRun,  # noqa: F811
    torchrun_2: DistributedRun,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # two runs of one job in one folder (what a script that
    # profiles itself leaves when run twice): same worker names, two stamps each
    shared = tmp_path / RUN_NAME
    shared.mkdir()
    for run in (slow_loader_2, torchrun_2):
        for trace in run.run_dir.iterdir():
            shutil.copy(trace, shared / trace.name)
    newest = {
        r: max((t for t in (*slow_loader_2.traces, *torchrun_2.traces) if rank_of(t) == r),
               key=lambda t: int(t.name.split(".")[1]))
        for r in (0, 1)
    }  # fmt: skip
    main(["dist", str(shared), "--executor", "local:1", "--no-cache", "--json"])
    captured = capsys.readouterr()
    assert json.loads(captured.out)["run"]["ranks"] == 2
    note = captured.err
    assert "more than one trace of rank 0, 1" in note and "leaving out 2 older" in note
    assert newest[0].name in note
    summaries = summarize_run(shared, "local:1", cache=False)
    assert [Path(s.path).name for s in summaries] == [newest[0].name, newest[1].name]
    # the same class of fault in the other commands that take a run folder:
    # `diff` averaged all four traces and `report` covered the oldest rank 0
    assert [t.path.name for t in one_run(shared)] == [newest[0].name, newest[1].name]
    assert [p.name for p in side_paths(str(shared))] == [newest[0].name, newest[1].name]
