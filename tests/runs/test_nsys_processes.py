"""An Nsight Systems report of a multi-process job holds every rank in one
file: each host process that launched GPU work is a rank of the run.

The shared export (FastVideo's wan-t2v sequence-parallel test on two H100s)
has two python processes, pids 111 and 112, each launching 1,721 kernels on
its own GPU.  Before, ``dist`` saw "1 rank" with both GPUs' work in it.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.ranks.dist_report import dist_report
from kinetolens.model.processes import gpu_processes, process_view
from kinetolens.runs import summarize_run
from tests.conftest import trace_path
from tests.terminal import cli_text

NSYS = "nsys/nsys-ai_h100_2gpu_1s.sqlite"


def _kernel_ms_per_process(path: Path) -> dict[int, float]:
    """Kernel time per process, read from the SQLite file itself (globalPid
    holds the pid in bits 24-47), not through kinetolens."""
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT (globalPid >> 24) & 16777215, SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1"
        ).fetchall()
    return {int(pid): total / 1e6 for pid, total in rows}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("nsys_run")
    shutil.copy(trace_path(NSYS), d / Path(NSYS).name)
    return d


def test_each_process_is_a_rank_with_its_own_gpu_work() -> None:
    trace = kinetolens.load(trace_path(NSYS), cache=False)
    assert gpu_processes(trace) == [111, 112]
    expected = _kernel_ms_per_process(trace_path(NSYS))
    views = [process_view(trace, pid) for pid in (111, 112)]
    for rank, (pid, view) in enumerate(zip((111, 112), views, strict=True)):
        assert (view.rank, view.world_size) == (rank, 2)
        assert view.ops["pid"].unique().to_list() == [pid] and view.runtime["pid"].unique().to_list() == [pid]
        kernels = view.kernels.filter(pl.col("kind") == "kernel")
        assert kernels["device"].unique().to_list() == [rank]  # process 111 ran GPU 0, 112 GPU 1
        assert kernels["dur"].sum() / 1e6 == pytest.approx(expected[pid], abs=1e-6)
    # together the two views hold every kernel once
    assert sum(v.kernels.height for v in views) == trace.kernels.height
    with pytest.raises(ValueError, match="launched no GPU work"):
        process_view(trace, 1)


def test_dist_compares_the_two_processes(run_dir: Path) -> None:
    notes: list[str] = []
    summaries = summarize_run(run_dir, "local:1", cache=False, notes=notes)
    assert [s.rank for s in summaries] == [0, 1]
    expected = _kernel_ms_per_process(trace_path(NSYS))
    # one step window each (no ProfilerStep ranges): its compute is its own GPU's kernels, not both
    ranks = dist_report(summaries).ranks
    assert ranks["compute_ms"].to_list() == pytest.approx([expected[111], expected[112]], abs=0.01)
    assert any("2 processes launched GPU work (pids 111, 112): each is a rank" in n for n in notes)
    out = cli_text("dist", str(run_dir), "--no-cache", columns=100)
    assert out.startswith("2 ranks of world size 2")


def test_each_ranks_communication_is_timed_by_its_nccl_kernels(tmp_path: Path) -> None:
    # The shared export runs no collective; a copy whose three longest kernels
    # of each process are renamed to NCCL's send/recv kernel stands for one.
    # Each rank's communication is its own NCCL kernels' time (with no NCCL
    # call recorded on the host, the kernels are the only evidence).
    run = tmp_path / "run"
    run.mkdir()
    path = run / "job.sqlite"
    shutil.copy(trace_path(NSYS), path)
    nccl = {}
    with sqlite3.connect(path) as db:
        nid = db.execute("SELECT MAX(id) + 1 FROM StringIds").fetchone()[0]
        db.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (nid, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"))
        for device in (0, 1):
            rows = db.execute(
                "SELECT rowid, end - start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = ? ORDER BY end - start DESC LIMIT 3",
                (device,),
            ).fetchall()
            db.executemany("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = ?, demangledName = ? WHERE rowid = ?",
                           [(nid, nid, r) for r, _ in rows])  # fmt: skip
            nccl[device] = sum(d for _, d in rows) / 1e6
    ranks = dist_report(summarize_run(run, "local:1", cache=False)).ranks
    assert ranks["comm_ms"].to_list() == pytest.approx([nccl[0], nccl[1]], abs=1e-3)  # 0.917 ms each
    assert ranks["exposed_comm_ms"].to_list() == pytest.approx([nccl[0], nccl[1]], abs=1e-3)
