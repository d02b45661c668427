"""A folder that holds ranks of different jobs is named, not mixed silently."""

from __future__ import annotations

import shutil
from pathlib import Path

from kinetolens.analysis.ranks.dist_report import dist_report
from kinetolens.analysis.ranks.distributed import RankSummary
from kinetolens.analysis.ranks.mixed_runs import mixed_run_notes
from kinetolens.runs import summarize_run
from tests.conftest import trace_path
from tests.terminal import run_cli

DLRM = "param/dlrm_kineto"


def test_a_rank_of_another_job_is_named(tmp_path: Path) -> None:
    # DLRM ranks 1-7 (world size 8, V100) beside HTA's NCCL trace, rank 0 of a
    # two-rank A100 job: the folder has a rank 0, so nothing else would tell.
    for path in sorted(trace_path(DLRM).glob("worker[1-7]_*.json.gz")):
        shutil.copy(path, tmp_path / path.name)
    shutil.copy(trace_path("hta/nccl_parser_config/nccl_data.json.gz"), tmp_path / "nccl_data.json.gz")
    notes = list(dist_report(summarize_run(tmp_path, "local:1", cache=False)).notes)
    assert (
        "the ranks record different world sizes (rank 0: world size 2; ranks 1-7: world size 8): traces of "
        "different jobs are in this folder, so the cross-rank figures compare them as if they were one"
    ) in notes
    assert any("rank 0: NVIDIA A100-PG509-200; ranks 1-7: Tesla V100-SXM2-32GB" in n for n in notes)
    done = run_cli("dist", str(tmp_path), "--no-cache", columns=100)
    assert done.returncode == 0 and "the ranks record different world sizes" in done.stderr


def test_the_ranks_of_one_job_say_nothing() -> None:
    same = [RankSummary(rank=r, world_size=8, path=f"r{r}", backend="nccl", device="H100") for r in range(8)]
    assert mixed_run_notes(same) == []
    # a rank that does not record a fact is not a disagreement
    assert mixed_run_notes([*same[:7], RankSummary(rank=7, world_size=None, path="r7", backend=None)]) == []


def test_more_ranks_than_the_world_size_they_record() -> None:
    ranks = [RankSummary(rank=r, world_size=2, path=f"r{r}", backend="gloo") for r in range(4)]
    assert mixed_run_notes(ranks) == ["4 ranks in a job of world size 2: traces of another job are in this folder"]
