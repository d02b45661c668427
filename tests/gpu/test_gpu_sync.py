"""``kinetolens.profile`` on CUDA records the synchronizations (``cuda_sync``
records: stream, event and device syncs), which the critical path reads as
sync edges; ``sync_events=False`` records none."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

import kinetolens


def _syncs(tmp_path: Path, **options: object) -> list[str]:
    a = torch.randn(1024, 1024, device="cuda")
    done = torch.cuda.Event()
    with kinetolens.profile(logdir=tmp_path, run="sync", **options) as prof:
        for _ in range(3):
            b = a @ a
            done.record()
            done.synchronize()  # an event sync
            torch.cuda.current_stream().synchronize()  # a stream sync
            float(b.sum())  # a copy back, and the device sync behind it
            prof.step()
    runtime = kinetolens.load(prof.trace_files[0], cache=False).runtime
    return runtime.filter(pl.col("kind").cast(pl.String) == "sync")["name"].unique().sort().to_list()


def test_synchronizations_are_recorded_unless_turned_off(tmp_path: Path) -> None:
    assert {"Event Sync", "Stream Sync"} <= set(_syncs(tmp_path / "on"))
    assert _syncs(tmp_path / "off", sync_events=False) == []
