"""Run metadata written beside each trace (``*.kinetolens.json``).

A trace alone does not say which code, torch build, command line or device
produced it; comparing two runs without that is guesswork.  Everything here
is gathered when a trace is written, never on the step path.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from typing import Any

SCHEMA = "kinetolens.capture/1"


def kinetolens_version() -> str:
    """The installed kinetolens version, or "unknown" from a bare checkout."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - stdlib since 3.8
        return "unknown"
    try:
        return version("kinetolens")
    except PackageNotFoundError:
        return "unknown"


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def distributed_info() -> dict[str, Any]:
    """World size and rank: from torch.distributed when initialized, else the
    launcher's environment (torchrun sets RANK/WORLD_SIZE before init), else a
    single process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return {
            "initialized": True,
            "backend": str(dist.get_backend()),
            "world_size": int(dist.get_world_size()),
            "rank": int(dist.get_rank()),
            "local_rank": _env_int("LOCAL_RANK"),
        }
    world = _env_int("WORLD_SIZE")
    rank = _env_int("RANK")
    return {
        "initialized": False,
        "backend": None,
        "world_size": world if world is not None else 1,
        "rank": rank if rank is not None else 0,
        "local_rank": _env_int("LOCAL_RANK"),
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _host_memory_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def device_info(cuda: bool) -> dict[str, Any]:
    """The device the job ran on: the current CUDA device when profiling
    CUDA, else the host CPU."""
    if cuda:
        import torch

        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        return {
            "type": "cuda",
            "index": index,
            "count": torch.cuda.device_count(),
            "name": props.name,
            "total_memory_bytes": int(props.total_memory),
            "sm_count": int(props.multi_processor_count),
            "compute_capability": f"{props.major}.{props.minor}",
        }
    return {
        "type": "cpu",
        "name": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "total_memory_bytes": _host_memory_bytes(),
    }


def collect(
    *,
    run: str,
    worker: str,
    trace_file: str,
    window: int,
    schedule: dict[str, Any],
    options: dict[str, Any],
    cuda: bool,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything known about the process that wrote ``trace_file``."""
    import torch

    dist = distributed_info()
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "trace_file": trace_file,
        "run": run,
        "worker": worker,
        "window": window,
        "written_unix_ms": int(time.time() * 1000),
        "kinetolens_version": kinetolens_version(),
        "torch_version": str(torch.__version__),
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "argv": list(sys.argv),
        "executable": sys.executable,
        "cwd": os.getcwd(),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "world_size": dist["world_size"],
        "rank": dist["rank"],
        "distributed": dist,
        "device": device_info(cuda),
        "schedule": schedule,
        "options": options,
    }
    if extra:
        data.update(extra)
    return data
