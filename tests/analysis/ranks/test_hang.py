"""``kinetolens hang``: flight recorder dumps of a hung job, read safely.

The hang itself is real: torch's Gloo backend keeps a flight recorder on
this CPU build (``TORCH_FR_BUFFER_SIZE``), so a 3-process Gloo job on
loopback where rank 2 skips an all_reduce leaves ranks 0 and 1 timing out in
it, and every rank writes what its recorder holds, as torch's pickle
(``_dump_fr_trace``) and as its JSON (``_dump_fr_trace_json``).  The desync
cases (two ranks calling different collectives or shapes at one sequence id)
would only hang or crash a real job, so their dumps are built the way
torch's own flight recorder tests build them
(test/distributed/flight_recorder/test_fr_analysis.py: ``create_one_entry``).
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import kinetolens
from kinetolens.analysis.ranks.hang import hang_report
from kinetolens.ingest.flight_recorder import read_dumps

SRC = str(Path(kinetolens.__file__).resolve().parents[1])

#: Each rank: all_reduce, broadcast, then all ranks but 2 an all_reduce of 8
#: floats that times out (3 s); every rank dumps its recorder, pickle and JSON.
JOB = textwrap.dedent(
    """
    import datetime, os, sys, time
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

    def work(rank, world, port, out):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=3))
        t = torch.ones(4)
        dist.all_reduce(t)
        dist.broadcast(t, 0)
        if rank != 2:
            try:
                dist.all_reduce(torch.ones(8))
            except RuntimeError:
                pass
        for kind, dump in (("pickle", _dump_fr_trace), ("json", _dump_fr_trace_json)):
            with open(f"{out}/{kind}/.tmp{rank}", "wb") as f:
                f.write(dump())
            os.rename(f"{out}/{kind}/.tmp{rank}", f"{out}/{kind}/nccl_trace_rank_{rank}")
        if rank == 2:  # stay up until the others have timed out and dumped
            while not all(os.path.exists(f"{out}/json/nccl_trace_rank_{r}") for r in range(world)):
                time.sleep(0.05)
        os._exit(0)

    if __name__ == "__main__":
        out, port = sys.argv[1], int(sys.argv[2])
        mp.spawn(work, args=(3, port, out), nprocs=3)
    """
)


def run_hang(directory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=SRC, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "kinetolens.cli.main", "hang", *extra, str(directory)],
        check=False, capture_output=True, text=True, timeout=120, env=env, cwd=directory,
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def gloo_hang(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch.distributed")
    out = tmp_path_factory.mktemp("gloo_hang")
    (out / "pickle").mkdir()
    (out / "json").mkdir()
    script = out / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="64")
    proc = subprocess.run(
        [sys.executable, str(script), str(out), str(_free_port())],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.mark.parametrize("kind", ["pickle", "json"])
def test_real_gloo_hang_names_the_rank_that_never_joined(gloo_hang: Path, kind: str) -> None:
    proc = run_hang(gloo_hang / kind, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["backends"] == ["gloo"]
    [stuck] = report["stuck"]
    assert (stuck["group_label"], stuck["seq_id"], stuck["op"]) == (
        "default_pg",
        3,
        "all_reduce",
    )
    assert stuck["input_sizes"] == [[8]]
    assert stuck["waiting"] == [0, 1]
    assert stuck["missing"] == [2]
    assert stuck["missing_last"] == [[2, 2]]
    entered = {r["rank"]: (r["last_entered"]["seq_id"], r["last_entered"]["op"]) for r in report["ranks"]}
    assert entered == {0: (3, "all_reduce"), 1: (3, "all_reduce"), 2: (2, "broadcast")}
    assert report["mismatch_count"] == 0


def test_real_gloo_hang_screen(gloo_hang: Path) -> None:
    proc = run_hang(gloo_hang / "pickle")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "STUCK  default_pg #3 all_reduce [[8]]" in lines
    assert any(
        line.split() == ["never", "joined:", "rank", "2", "(rank", "2", "last", "entered", "#2)"] for line in lines
    )
    assert len(lines) <= 25


# -- dumps built as torch's flight recorder tests build them -----------------


def create_one_entry(
    record_id: int, name: str, input_sizes: list[list[int]], output_sizes: list[list[int]],
    state: str = "completed", collective_seq_id: int = 0, pg_info: tuple[str, str] = ("0", "default_pg"),
) -> dict[str, Any]:  # fmt: skip
    """torch's ``create_one_entry`` (string sequence ids and a single dtype string, as there)."""
    return {
        "profiling_name": f"nccl:{name}",
        "state": state,
        "process_group": pg_info,
        "input_sizes": input_sizes,
        "output_sizes": output_sizes,
        "input_dtypes": "float32",
        "output_dtypes": "float32",
        "collective_seq_id": str(collective_seq_id),
        "p2p_seq_id": "0",
        "time_created_ns": 0,
        "frames": [],
        "record_id": record_id,
        "is_p2p": False,
    }


def write_dumps(directory: Path, entries_by_rank: dict[int, list[dict[str, Any]]]) -> Path:
    world = sorted(entries_by_rank)
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(world)}}
    for rank, entries in entries_by_rank.items():
        dump = {
            "version": "2.8",
            "pg_config": config,
            "pg_status": {},
            "entries": entries,
        }
        (directory / f"dump_file_rank_{rank}").write_bytes(pickle.dumps(dump))
    return directory


def test_different_op_or_shapes_at_one_sequence_id_are_named(tmp_path: Path) -> None:
    def calls(second: list[int], third: str) -> list[dict[str, Any]]:
        return [
            create_one_entry(0, "all_reduce", [[4, 4]], [[4, 4]], collective_seq_id=1),
            create_one_entry(1, "all_reduce", [second], [second], collective_seq_id=2),
            create_one_entry(2, third, [[4, 4]], [[4, 4]], collective_seq_id=3),
            # uneven all_to_all inputs are by design, not a mismatch
            create_one_entry(3, "all_to_all", [[second[0]]], [[4]], collective_seq_id=4),
        ]

    write_dumps(
        tmp_path,
        {
            0: calls([4, 4], "all_reduce"),
            1: calls([5, 5], "all_reduce"),
            2: calls([4, 4], "broadcast"),
        },
    )
    report = hang_report(read_dumps(tmp_path))
    assert [(m.seq_id, m.kind) for m in report.mismatches] == [(2, "sizes"), (3, "op")]
    sizes, op = report.mismatches
    assert sizes.calls == (
        ((0, 2), "all_reduce [[4, 4]] -> [[4, 4]]"),
        ((1,), "all_reduce [[5, 5]] -> [[5, 5]]"),
    )
    assert [ranks for ranks, _ in op.calls] == [(0, 1), (2,)]
    assert op.calls[1][1].startswith("broadcast ")
    assert report.stuck == ()  # every call completed


def test_completed_collective_not_entered_by_a_rank_is_not_stuck_but_missing_one_is(
    tmp_path: Path,
) -> None:
    entries = {
        0: [create_one_entry(0, "all_reduce", [[2]], [[2]], collective_seq_id=1),
            create_one_entry(1, "all_gather", [[2]], [[4]], "started", collective_seq_id=2)],
        1: [create_one_entry(0, "all_reduce", [[2]], [[2]], collective_seq_id=1)],
    }  # fmt: skip
    report = hang_report(read_dumps(write_dumps(tmp_path, entries)))
    [stuck] = report.stuck
    assert (stuck.seq_id, stuck.op, stuck.waiting, stuck.missing) == (
        2,
        "all_gather",
        (0,),
        (1,),
    )
    assert [r.last_completed.seq_id if r.last_completed else None for r in report.ranks] == [1, 1]


# -- untrusted input ----------------------------------------------------------


class _RunsACommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _one_line_error(proc: subprocess.CompletedProcess[str], path: Path) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(path) in lines[0]
    return lines[0]


def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    dump = {
        "version": "2.10",
        "pg_config": {},
        "pg_status": {},
        "entries": [_RunsACommand(marker)],
    }
    bad = tmp_path / "nccl_trace_rank_1"
    bad.write_bytes(pickle.dumps(dump))
    write_dumps(
        tmp_path,
        {0: [create_one_entry(0, "all_reduce", [[2]], [[2]], collective_seq_id=1)]},
    )
    # the same bytes through a plain pickle.loads would run the command: the test's own check of itself
    assert b"system" in bad.read_bytes()
    line = _one_line_error(run_hang(tmp_path), bad)
    assert "refused" in line and "posix.system" in line
    assert not marker.exists()


def test_truncated_dump_is_one_line(tmp_path: Path) -> None:
    write_dumps(
        tmp_path,
        {0: [create_one_entry(0, "all_reduce", [[2]], [[2]], collective_seq_id=1)]},
    )
    whole = (tmp_path / "dump_file_rank_0").read_bytes()
    (tmp_path / "dump_file_rank_0").write_bytes(whole[: len(whole) // 2])
    assert "truncated" in _one_line_error(run_hang(tmp_path), tmp_path / "dump_file_rank_0")


def test_truncated_json_dump_is_one_line(tmp_path: Path) -> None:
    dump = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": []}
    path = tmp_path / "nccl_trace_rank_0.json"
    path.write_text(json.dumps(dump)[:30])
    assert "JSON" in _one_line_error(run_hang(tmp_path), path)


def test_directory_without_dumps_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here")
    _one_line_error(run_hang(tmp_path), tmp_path)


# -- point to point ----------------------------------------------------------------
# Gloo's recorder (torch 2.13) keeps no send/recv (checked: a 3-rank job whose
# middle stage never forwards the second activation records only its
# all_reduce), so these dumps are NCCL's, as ProcessGroupNCCL names the calls:
# "nccl:send 0->1" on the sender, "nccl:recv 1<-0" on the receiver.


def p2p_entry(record_id: int, name: str, sizes: list[list[int]], state: str = "completed", p2p_seq_id: int = 1) -> dict[str, Any]:
    entry = create_one_entry(record_id, name, sizes, sizes, state)
    entry.update(is_p2p=True, p2p_seq_id=str(p2p_seq_id), collective_seq_id="0")
    return entry


def test_a_pipeline_hang_names_the_stage_that_never_sent(tmp_path: Path) -> None:
    # stages 0 -> 1 -> 2, two microbatches: stage 1 forwards only the first, so
    # stage 2 waits in its second receive and stage 0's second send is never received
    entries = {
        0: [create_one_entry(0, "all_reduce", [[4]], [[4]], collective_seq_id=1),
            p2p_entry(1, "send 0->1", [[16]], p2p_seq_id=1),
            p2p_entry(2, "send 0->1", [[16]], "started", p2p_seq_id=2)],
        1: [create_one_entry(0, "all_reduce", [[4]], [[4]], collective_seq_id=1),
            p2p_entry(1, "recv 1<-0", [[16]], p2p_seq_id=1),
            p2p_entry(2, "send 1->2", [[16]], p2p_seq_id=2)],
        2: [create_one_entry(0, "all_reduce", [[4]], [[4]], collective_seq_id=1),
            p2p_entry(1, "recv 2<-1", [[16]], p2p_seq_id=1),
            p2p_entry(2, "recv 2<-1", [[16]], "started", p2p_seq_id=2)],
    }  # fmt: skip
    report = hang_report(read_dumps(write_dumps(tmp_path, entries)))
    assert report.stuck == ()  # the collective finished: the hang is in point-to-point
    got = {(t.src, t.dst): (t.index, t.waiting, t.missing, t.missing_side) for t in report.stuck_transfers}
    assert got == {(0, 1): (2, (0,), 1, "recv"), (1, 2): (2, (2,), 1, "send")}
    lines = run_hang(tmp_path).stdout.splitlines()
    at = lines.index("STUCK  default_pg send/recv 1 -> 2, transfer #2 [[16]]")
    assert lines[at + 1].split() == ["entered", "it,", "waiting:", "rank", "2"]
    assert lines[at + 2].split() == ["never", "entered:", "rank", "1", "(its", "send)"]


def test_transfers_are_matched_by_their_ends_and_order_not_by_p2p_seq_id(tmp_path: Path) -> None:
    # rank 1 receives from 0 and from 2: its p2p_seq_ids count both, the senders' do not
    entries = {
        0: [p2p_entry(0, "send 0->1", [[8]], p2p_seq_id=1)],
        1: [p2p_entry(0, "recv 1<-2", [[8]], p2p_seq_id=1), p2p_entry(1, "recv 1<-0", [[9]], p2p_seq_id=2)],
        2: [p2p_entry(0, "send 2->1", [[8]], p2p_seq_id=1)],
    }  # fmt: skip
    report = hang_report(read_dumps(write_dumps(tmp_path, entries)))
    assert report.stuck_transfers == ()
    [m] = report.transfer_mismatches
    assert (m.src, m.dst, m.index, m.send_sizes, m.recv_sizes) == (0, 1, 1, ((8,),), ((9,),))


def test_a_recorder_that_dropped_old_calls_is_not_matched_from_the_wrong_first_transfer(tmp_path: Path) -> None:
    entries = {
        0: [p2p_entry(5, "send 0->1", [[8]], "started", p2p_seq_id=6)],  # record ids 0-4 were dropped
        1: [p2p_entry(0, "recv 1<-0", [[8]], p2p_seq_id=1)],
    }
    report = hang_report(read_dumps(write_dumps(tmp_path, entries)))
    assert report.stuck_transfers == ()
    assert "point-to-point 0 -> 1 not matched: a rank's recorder dropped its oldest calls" in report.notes
