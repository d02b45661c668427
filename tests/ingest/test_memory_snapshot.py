"""A CUDA allocator snapshot is read as plain data only, and its peak is what the allocator reached.

Loading a pickle can run code; the snapshot reader builds plain containers
and refuses anything else, so a hostile file is one line of error and runs
nothing.  The peak per device is the bytes held when recording began plus
the highest running sum of allocations less completed frees, as
``torch.cuda.max_memory_allocated()`` counts them (a free requested but not
completed still holds its block).  The snapshot here is shaped as
``torch.cuda.memory._snapshot()`` writes it (the GPU suite checks a real
one against torch's own peak).
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from kinetolens.analysis.memory.snapshot import snapshot_peaks
from kinetolens.errors import TraceError
from kinetolens.ingest.memory_snapshot import read_snapshot, snapshot_tables

MIB = 1 << 20
TRAIN = [{"filename": "/usr/lib/python3/site-packages/torch/nn/modules/linear.py", "line": 125, "name": "forward"},
         {"filename": "train.py", "line": 42, "name": "step"}]  # fmt: skip


def _event(action: str, addr: int, size: int, t: int) -> dict:  # type: ignore[type-arg]
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": TRAIN}


def _snapshot() -> dict:  # type: ignore[type-arg]
    """Device 0: 10 MiB held before recording; +4, +8 (peak 22), free 4 (requested, then completed), +2; held at the end 16."""
    trace = [
        _event("segment_alloc", 0x1000, 20 * MIB, 1),
        _event("alloc", 0xA, 4 * MIB, 2),
        _event("alloc", 0xB, 8 * MIB, 3),
        _event("free_requested", 0xA, 4 * MIB, 4),
        _event("free_completed", 0xA, 4 * MIB, 5),
        _event("alloc", 0xC, 2 * MIB, 6),
    ]
    blocks = [
        {"address": 0x0, "size": 10 * MIB, "requested_size": 10 * MIB, "state": "active_allocated", "frames": []},
        {"address": 0xB, "size": 8 * MIB, "requested_size": 8 * MIB, "state": "active_awaiting_free", "frames": TRAIN},
        {"address": 0xC, "size": 2 * MIB, "requested_size": 2 * MIB, "state": "active_allocated", "frames": TRAIN},
        {"address": 0xD, "size": 6 * MIB, "requested_size": 0, "state": "inactive", "frames": []},
    ]
    segment = {"device": 0, "address": 0x0, "total_size": 26 * MIB, "stream": 0, "segment_type": "large",
               "allocated_size": 20 * MIB, "active_size": 20 * MIB, "blocks": blocks}  # fmt: skip
    return {"segments": [segment], "device_traces": [trace], "allocator_settings": {"expandable_segments": False}}


def _write(path: Path, data: object) -> Path:
    path.write_bytes(pickle.dumps(data))
    return path


def test_the_peak_is_the_start_plus_the_highest_running_sum(tmp_path: Path) -> None:
    actions, blocks = snapshot_tables(read_snapshot(_write(tmp_path / "s.pickle", _snapshot())))
    assert actions.height == 6 and blocks.height == 4
    (row,) = snapshot_peaks(actions, blocks).to_dicts()
    # held at the end: 10 + 8 (awaiting free: still allocated) + 2 = 20; the window added 4 + 8 - 4 + 2 = 10
    assert row["at_end_bytes"] == 20 * MIB and row["at_start_bytes"] == 10 * MIB
    assert row["peak_bytes"] == 22 * MIB and row["peak_time_us"] == 3
    assert row["peak_frame"] == "train.py:42 step"  # the caller's frame, not torch's


def test_a_window_that_only_frees_peaks_at_its_start(tmp_path: Path) -> None:
    data = _snapshot()
    data["device_traces"] = [[_event("free_completed", 0xA, 4 * MIB, 1)]]
    (row,) = snapshot_peaks(*snapshot_tables(read_snapshot(_write(tmp_path / "s.pickle", data)))).to_dicts()
    assert row["at_start_bytes"] == row["peak_bytes"] == 24 * MIB and row["peak_frame"] is None


class _Hostile:
    def __reduce__(self) -> tuple:  # type: ignore[type-arg]
        return (os.system, (f"touch {self.marker}",))

    marker = ""


def test_a_pickle_that_names_code_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    _Hostile.marker = str(marker)
    path = _write(tmp_path / "evil.pickle", {"segments": [], "device_traces": [], "x": _Hostile()})
    with pytest.raises(TraceError) as caught:
        read_snapshot(path)
    assert not marker.exists()
    assert str(caught.value).startswith(f"{path}: not a memory snapshot: it names ") and "\n" not in str(caught.value)


@pytest.mark.parametrize("content", [b"", b"not a pickle", pickle.dumps([1, 2]), pickle.dumps({"segments": []})],
                         ids=["empty", "text", "a list", "no traces"])  # fmt: skip
def test_what_is_not_a_snapshot_is_one_line(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.pickle"
    path.write_bytes(content)
    with pytest.raises(TraceError) as caught:
        read_snapshot(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_kinetolens_memory_reads_a_snapshot(tmp_path: Path) -> None:
    from tests.terminal import run_cli

    path = _write(tmp_path / "host_1.1700000000000.memory_snapshot.pickle", _snapshot())
    res = run_cli("memory", str(path), columns=80)
    assert res.returncode == 0, res.stderr
    assert "22.0 MiB" in res.stdout and "10.0 MiB" in res.stdout and "train.py:42 step" in res.stdout
    assert max(len(line) for line in res.stdout.splitlines()) <= 80
    res = run_cli("memory", "--json", str(path))
    doc = json.loads(res.stdout)
    assert doc["format"] == "cuda_memory_snapshot" and doc["peaks"][0]["peak_bytes"] == 22 * MIB
    hostile = tmp_path / "evil.pickle"
    _Hostile.marker = str(tmp_path / "ran")
    hostile.write_bytes(pickle.dumps({"x": _Hostile()}))
    res = run_cli("memory", str(hostile))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "ran").exists()
