"""``kinetolens.profile(memory_snapshot=True)`` on a training step: the snapshot
beside the trace loads through the plain-data reader, and its peak equals
``torch.cuda.max_memory_allocated()`` over the window (within 5%)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from kinetolens.analysis.memory.snapshot import snapshot_peaks
from kinetolens.capture.memory_snapshot import snapshot_path
from kinetolens.ingest.memory_snapshot import read_snapshot, snapshot_tables
from tests.gpu.models import SMALL, Trainer, profile_two_steps


def test_snapshot_peak_matches_torch(tmp_path: Path) -> None:
    trainer = Trainer(SMALL, "cuda")
    for _ in range(3):
        trainer.step()
    trace, peak = profile_two_steps(trainer, tmp_path, "snapshot", memory_snapshot=True)
    snapshot = snapshot_path(trace)
    assert snapshot.is_file()
    (row,) = snapshot_peaks(*snapshot_tables(read_snapshot(snapshot))).to_dicts()
    assert row["peak_bytes"] == pytest.approx(peak, rel=0.05)
