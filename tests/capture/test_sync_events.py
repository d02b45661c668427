"""``kinetolens.profile`` records CUDA synchronizations where CUDA is profiled.

Kineto writes stream, event and device synchronizations (``cuda_sync``
records) only when its experimental config asks; the critical path reads
them as sync edges (HTA's does too).  kinetolens asks for them whenever CUDA
is profiled, unless ``sync_events=False`` or the user passes an
``experimental_config`` of their own; the run's metadata says which.  The
GPU suite checks the records themselves (tests/gpu/test_gpu_sync.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import kinetolens
from kinetolens.capture.counters import experimental_config, experimental_options
from kinetolens.ingest.run_metadata import read_run_metadata


def test_sync_events_are_asked_for_where_cuda_is_profiled() -> None:
    assert experimental_options(None, True, cuda_profiled=True, sync_events=True) == {"enable_cuda_sync_events": True}
    assert experimental_options(None, True, cuda_profiled=False, sync_events=True) == {}
    assert experimental_options(None, True, cuda_profiled=True, sync_events=False) == {}
    both = experimental_options(["sm__throughput.avg.pct_of_peak_sustained_elapsed"], False, cuda_profiled=True, sync_events=True)
    assert both == {
        "profiler_metrics": ["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
        "profiler_measure_per_kernel": False,
        "enable_cuda_sync_events": True,
    }
    # the installed torch takes every keyword
    assert isinstance(experimental_config(both), torch.profiler._ExperimentalConfig)


def _captured(tmp_path: Path, **options: object) -> dict:  # type: ignore[type-arg]
    with kinetolens.profile(logdir=tmp_path, run="sync", **options) as prof:
        torch.ones(64, 64) @ torch.ones(64, 64)
        prof.step()
    meta = read_run_metadata(prof.trace_files[0])
    assert meta is not None
    return meta["options"]  # type: ignore[no-any-return]


def test_the_metadata_says_whether_syncs_were_recorded(tmp_path: Path) -> None:
    cuda = torch.cuda.is_available()
    assert _captured(tmp_path / "default")["sync_events"] is cuda
    assert _captured(tmp_path / "off", sync_events=False)["sync_events"] is False
    # a config of the user's own is theirs: nothing is added to it
    own = torch.profiler._ExperimentalConfig(verbose=True)
    assert _captured(tmp_path / "own", experimental_config=own)["sync_events"] is False
