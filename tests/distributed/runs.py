"""Profiled multi-process gloo DDP runs as test data.

Two real jobs (see :mod:`tests.distributed.ddp_job`), each run at most once
per test session however many tests or modules ask for it:

* :func:`torchrun_2`: ``kinetolens run -- torchrun --standalone`` with two
  ranks, profiled from optimizer steps (zero-code capture);
* :func:`spawn_4`: four ranks from ``torch.multiprocessing.spawn`` that
  profile themselves with ``kinetolens.profile``;
* :func:`slow_loader_2`: two spawned ranks training from a ``DataLoader``
  whose batches take :data:`DELAY_MS` longer to load on rank 1, with DDP's
  gradients in several buckets (a planted straggler); both exit in the
  middle of the last recorded step (:data:`CUT_STEP`).

Use them from any test module by importing the fixtures::

    from tests.distributed.runs import spawn_4, torchrun_2  # noqa: F401

    def test_something(spawn_4: DistributedRun) -> None:
        for trace in spawn_4.traces: ...   # one trace per rank, rank order

No ports are picked ahead of time: torchrun's ``--standalone`` rendezvous
binds its own port and hands the live store to its workers, and the spawned
ranks meet through a file.  A job that fails or hangs fails the test that
asked for it, with the job's output.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

JOB = Path(__file__).resolve().with_name("ddp_job.py")
RUN_NAME = "ddp_job"
TRACE_SUFFIX = ".pt.trace.json.gz"
# Generous: four interpreters importing torch on two busy cores take seconds,
# but a shared CI machine can be many times slower than that.
TIMEOUT_S = 300

#: The planted straggler of :func:`slow_loader_2`: rank 1 loads each batch
#: this much later than rank 0.
DELAY_MS = 50.0
SLOW_RANK = 1
#: The recorded steps of :func:`slow_loader_2`: two whole, then one the
#: processes exit in.
WHOLE_STEPS = [2, 3]
CUT_STEP = 4

# (mode, world size, extra job arguments, session base dir) -> run; a
# session's runs are shared by every module that imports the fixtures.
_RUNS: dict[tuple[str, int, tuple[str, ...], Path], DistributedRun] = {}


@dataclass(frozen=True)
class DistributedRun:
    """One finished, profiled DDP job."""

    mode: str  # "torchrun" or "spawn"
    world_size: int
    logdir: Path
    #: The folder of the run's traces: ``kinetolens run`` gives each run its
    #: own, ``LOGDIR/RUN/<start time>`` (``LOGDIR/RUN/latest`` links to the
    #: newest); ``kinetolens.profile`` writes to ``LOGDIR/RUN``.
    run_dir: Path
    traces: tuple[Path, ...]  # one per rank, in rank order
    output: str  # the job's stderr (and kinetolens' report)


def rank_of(trace: Path) -> int:
    """The rank in a ``<host>_rank<r>.<ms>.pt.trace.json.gz`` name."""
    m = re.search(r"_rank(\d+)\.\d+\.pt\.trace\.json\.gz$", trace.name)
    if m is None:
        raise AssertionError(f"not a per-rank trace name: {trace.name}")
    return int(m[1])


def _command(mode: str, world_size: int, logdir: Path, extra: tuple[str, ...] = ()) -> list[str]:
    if mode == "torchrun":
        return [
            sys.executable, "-m", "kinetolens.cli.main",
            "run", "--logdir", str(logdir), "--run", RUN_NAME, "--steps", "2", "--warmup", "1", "--",
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", str(world_size), str(JOB), *extra,
        ]  # fmt: skip
    if mode == "spawn":
        return [
            sys.executable, str(JOB), "--spawn", str(world_size), "--logdir", str(logdir), "--run", RUN_NAME, *extra
        ]
    raise ValueError(f"unknown mode {mode!r}")


def profile_ddp(mode: str, world_size: int, logdir: Path, extra: tuple[str, ...] = ()) -> DistributedRun:
    """Run the job now (no caching) and return what it wrote."""
    try:
        res = subprocess.run(
            _command(mode, world_size, logdir, extra),
            cwd=logdir.parent,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{mode} DDP job with {world_size} ranks ran past {TIMEOUT_S}s:\n{exc.stderr!s:.3000}")
    if res.returncode != 0:
        pytest.fail(f"{mode} DDP job with {world_size} ranks exited {res.returncode}:\n{res.stderr[-3000:]}")
    run_dir = logdir.resolve() / RUN_NAME
    if mode == "torchrun":
        run_dir = (run_dir / "latest").resolve()
    traces = sorted(run_dir.glob(f"*{TRACE_SUFFIX}"), key=rank_of)
    return DistributedRun(mode, world_size, logdir, run_dir, tuple(traces), res.stderr)


def shared_run(
    factory: pytest.TempPathFactory, mode: str, world_size: int, extra: tuple[str, ...] = ()
) -> DistributedRun:
    """The session's run of ``mode`` x ``world_size`` (with ``extra`` job
    arguments), made on first use; skips where this torch cannot run gloo."""
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    key = (mode, world_size, extra, factory.getbasetemp())
    if key not in _RUNS:
        _RUNS[key] = profile_ddp(mode, world_size, factory.mktemp(f"ddp-{mode}-{world_size}"), extra)
    return _RUNS[key]


@pytest.fixture(scope="session")
def torchrun_2(tmp_path_factory: pytest.TempPathFactory) -> DistributedRun:
    """Two ranks under ``kinetolens run -- torchrun --standalone``."""
    return shared_run(tmp_path_factory, "torchrun", 2)


@pytest.fixture(scope="session")
def spawn_4(tmp_path_factory: pytest.TempPathFactory) -> DistributedRun:
    """Four spawned ranks, each inside ``kinetolens.profile``."""
    return shared_run(tmp_path_factory, "spawn", 4)


@pytest.fixture(scope="session")
def slow_loader_2(tmp_path_factory: pytest.TempPathFactory) -> DistributedRun:
    """Two spawned ranks; rank :data:`SLOW_RANK` loads each batch :data:`DELAY_MS` later."""
    extra = ("--delay-ms", str(DELAY_MS), "--slow-rank", str(SLOW_RANK), "--cut-last-step")
    return shared_run(tmp_path_factory, "spawn", 2, extra)
