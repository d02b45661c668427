"""Parallel dimensions, exposed time and transfer vs skew on real NCCL ranks:
the 8 V100 ranks of a DLRM job (all-to-all of sharded embeddings, DDP's
all-reduce, both on the default group, no group args recorded), HTA's
``nccl_parser_config`` trace (groups recorded in full) and HTA's figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest

import kinetolens
from kinetolens.analysis.ranks.collectives import collective_calls
from kinetolens.analysis.ranks.dist_report import dist_report
from kinetolens.analysis.ranks.groups import group_dimension
from kinetolens.cli.main import main
from kinetolens.runs import summarize_run
from tests.conftest import GOLDEN, trace_path

DLRM = "param/dlrm_kineto"


@pytest.fixture(scope="module")
def dlrm():
    trace_path(f"{DLRM}/worker0_step_12.1694128201545.pt.trace.json.gz")
    return dist_report(summarize_run(trace_path(DLRM), "local:1", cache=False))


def test_dlrm_names_each_group_its_dimension_and_basis(dlrm) -> None:
    dims = {r["dimension"]: r for r in dlrm.dimensions.iter_rows(named=True)}
    assert set(dims) == {"expert", "data"}
    assert dims["expert"]["basis"].startswith("collective: all-to-all")
    assert dims["data"]["basis"].startswith("rank pattern") and "world of 8" in dims["data"]["basis"]
    assert dims["expert"]["calls"] == 5 and dims["data"]["calls"] == 3
    # bytes as the collectives table counts them, per dimension
    coll = {r["kind"]: r for r in dlrm.collectives.iter_rows(named=True)}
    assert dims["expert"]["bytes"] == coll["alltoall"]["bytes"]
    assert dims["data"]["busbw_gbps"] == pytest.approx(coll["allreduce"]["busbw_gbps"])


def test_dlrm_exposed_time_per_dimension_adds_up_to_the_ranks_exposed_comm(dlrm) -> None:
    """Each dimension's exposed time per step; the two dimensions never overlap
    here, so they sum to the ranks' exposed communication (mean over ranks)."""
    dims = {r["dimension"]: r for r in dlrm.dimensions.iter_rows(named=True)}
    assert dims["expert"]["exposed_ms"] == pytest.approx(4.656, abs=0.002)
    assert dims["data"]["exposed_ms"] == pytest.approx(1.205, abs=0.002)
    total = dims["expert"]["exposed_ms"] + dims["data"]["exposed_ms"]
    assert total == pytest.approx(dlrm.ranks["exposed_comm_ms"].mean(), abs=1e-6)
    step = dlrm.ranks["step_ms"].mean()
    assert dims["expert"]["step_share"] == pytest.approx(dims["expert"]["exposed_ms"] / step)
    assert all(r["exposed_ms"] <= r["comm_ms_per_step"] for r in dims.values())


def test_dlrm_transfer_vs_skew(dlrm) -> None:
    """All ranks sit on one host: clocks agree within microseconds, and every
    call waits far longer for its last rank than it takes to move the data."""
    assert dlrm.clocks["offset_ms"].abs().max() < 0.01
    skew = {r["collective"]: r for r in dlrm.skew.iter_rows(named=True)}
    a2a, ar = skew["all_to_all"], skew["all_reduce"]
    assert a2a["transfer_us"] == pytest.approx(8.4, abs=0.1)
    assert ar["transfer_us"] == pytest.approx(58.3, abs=0.1)
    assert a2a["arrival_skew_us"] > 100 * a2a["transfer_us"]
    assert a2a["bound_by"] == ar["bound_by"] == "late rank"
    # arrival from aligned timestamps agrees with lateness from durations on one host
    st = dlrm.stragglers
    assert (st["arrival_ms"] - st["late_ms"]).abs().max() < 0.01


def test_dlrm_comm_overlap_equals_hta(dlrm) -> None:
    """HTA's comp_comm_overlap_pctg (comm-kernel time under compute kernels over
    comm-kernel time, per rank): the same kernels and the same single step, so
    the same figure to its rounding."""
    hta = json.loads((GOLDEN / "hta" / "param__dlrm_kineto.json").read_text())
    want = {r["rank"]: r["comp_comm_overlap_pctg"] for r in hta["calls"]["get_comm_comp_overlap"]["result"]["records"]}
    got = {r["rank"]: 100 * r["overlap_ms"] / r["comm_ms"] for r in dlrm.ranks.iter_rows(named=True)}
    for rank, pct in want.items():
        assert got[rank] == pytest.approx(pct, abs=0.006), rank


def test_groups_from_their_recorded_description_and_ranks() -> None:
    t = kinetolens.load(trace_path("hta/nccl_parser_config/nccl_data.json.gz"), cache=False)
    calls = collective_calls(t)
    assert set(calls["group"]) == {"0"} and set(calls["group_desc"]) == {"default_pg"}
    assert set(calls["group_ranks"]) == {"[0, 1]"} and set(calls["dimension"]) == {"data"}


@pytest.mark.parametrize(
    ("desc", "ranks", "kind", "dim", "basis"),
    [
        ("mesh_tp", "[0, 1]", "allreduce", "tensor", "description"),
        ("mesh_dp_shard", "[0, 4]", "allgather", "data", "description"),
        ("mesh_cp", "[0, 2]", "allgather", "context", "description"),
        ("mesh_ep", "[0, 1, 2, 3]", "alltoall", "expert", "description"),
        ("default_pg", "[0, 1, 2, 3, 4, 5, 6, 7]", "sendrecv", "pipeline", "collective"),
        (None, "[4, 5, 6, 7]", "allreduce", "tensor", "rank pattern: contiguous"),
        (None, "[1, 3, 5, 7]", "allreduce", "data", "rank pattern: ranks strided by 2"),
        ("default_pg", "[0, 1, 2, 3, 4, 5, 6, 7]", "allreduce", "data", "rank pattern: the whole world"),
    ],
)
def test_dimension_rules(desc, ranks, kind, dim, basis) -> None:
    got, why = group_dimension(desc, ranks, kind, 8)
    assert (got, why.split(":")[0] if basis in ("description", "collective") else why[: len(basis)]) == (dim, basis)


def test_dist_prints_dimensions_skew_and_clocks(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # every column (a test worker's output is no terminal: 80 by default)
    trace_path(f"{DLRM}/worker0_step_12.1694128201545.pt.trace.json.gz")
    assert main(["dist", str(trace_path(DLRM)), "--executor", "local:1", "--no-cache"]) in (0, None)
    out = capsys.readouterr().out
    assert "parallel dimensions" in out and "expert" in out and "collective: all-to-all" in out
    assert "transfer vs arrival skew" in out and "late rank" in out
    assert "clock offsets" in out
    assert main(["dist", str(trace_path(DLRM)), "--executor", "local:1", "--no-cache", "--json"]) in (0, None)
    doc = json.loads(capsys.readouterr().out)
    assert {"dimensions", "skew", "clocks"} <= set(doc)
    assert pl.DataFrame(doc["dimensions"])["dimension"].to_list() == ["expert", "data"]


def test_trace_filter_overlap_per_step_equals_hta() -> None:
    """HTA leaves out the last profiler step: on the first step alone, our per-step
    overlap over communication is its comp_comm_overlap_pctg for both ranks."""
    from kinetolens.analysis.ranks.collectives import comm_overlap_per_step

    hta = json.loads((GOLDEN / "hta" / "hta__trace_filter.json").read_text())
    want = {r["rank"]: r["comp_comm_overlap_pctg"] for r in hta["calls"]["get_comm_comp_overlap"]["result"]["records"]}
    for rank, pct in want.items():
        steps = comm_overlap_per_step(kinetolens.load(trace_path(f"hta/trace_filter/sampled_rank-{rank}.json.gz")))
        first = steps.sort("step").row(0, named=True)
        assert 100 * first["overlap_ns"] / first["comm_ns"] == pytest.approx(pct, abs=0.006)


def test_dimension_evidence_reads_whole_at_80_columns(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    # The evidence is a sentence: under the table, never a column cut to "colle…bles)".
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["dist", str(trace_path(DLRM)), "--executor", "local:1", "--no-cache"]) in (0, None)
    out = capsys.readouterr().out
    assert "expert (default): collective: all-to-all (MoE experts, sharded embedding tables)" in out
    assert "…" not in out.split("parallel dimensions")[1].split("collectives")[0]
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.slow  # a 64-rank generated run
def test_a_mesh_of_many_groups_is_shown_per_dimension(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 generated ranks on a (dp 2, ep 4, tp 8) mesh (bench/gen_ranks.py --mesh 8,4): the
    # all-to-alls in 16 expert groups, the all-reduces in 8 tensor and 32 data groups.
    # The terminal shows one row per dimension; each group's row is in --json.
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    from gen_ranks import generate

    generate(trace_path("hta/trace_filter/sampled_rank-0.json.gz"), tmp_path, 64, None, mesh=(8, 4))
    report = dist_report(summarize_run(tmp_path, "local:1", cache=False))
    totals = {r["dimension"]: r for r in report.dimension_totals.iter_rows(named=True)}
    assert {d: r["groups"] for d, r in totals.items()} == {"expert": 16, "tensor": 8, "data": 33}  # data: 32 + the whole world
    # every rank is in one group of each dimension: a dimension's per-rank calls are its groups' calls
    assert totals["expert"]["calls"] == pytest.approx(4) and totals["tensor"]["calls"] == pytest.approx(2)
    assert report.dimensions.height == 16 + 8 + 33
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["dist", str(tmp_path), "--executor", "local:1", "--no-cache"]) in (0, None)
    out = capsys.readouterr().out
    assert "parallel dimensions, their groups together" in out and "57 process groups: each group's row is in --json" in out
    assert "expert: 16 groups, description: 'mesh_ep'" in out
    # per-rank tables: the first 16 rows in the terminal, every rank in --json
    assert "16 of 64 rows shown (the slowest steps first); --json has every row" in out
    assert len(out.splitlines()) < 200
