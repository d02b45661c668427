"""Where per-rank work runs: a local process pool, or a Dask cluster.

An executor maps a picklable function over items and returns the results in
order.  :class:`LocalExecutor` sizes its pool to the machine: no more
workers than cores, and no more than fit in the memory budget at the peak a
trace of the run's largest size needs to load (loading is the memory-heavy
part; summaries are small).  :class:`DaskExecutor` sends the same function to
a ``dask.distributed`` scheduler; the traces and the cache must then
be on storage every worker sees (a shared file system, or an fsspec URL such
as ``s3://``: see :mod:`kinetolens.runs.storage`), as with NVIDIA's Nsight
recipes.  Dask is an optional extra and is imported only here, only
when asked for.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kinetolens.errors import TraceError

T = TypeVar("T")
R = TypeVar("R")

DASK_ENV = "DASK_SCHEDULER_ADDRESS"
#: Share of the available memory the local pool may plan to use.
MEMORY_SHARE = 0.5
#: Peak memory while loading, per byte of trace file: gzip'd Kineto JSON
#: inflates ~15x and the decoded events and tables take a few times that.
PEAK_PER_BYTE = {".gz": 60.0, ".json": 6.0, ".sqlite": 4.0}
#: Below this, a pool costs more to start than it saves.
MIN_POOL_BYTES = 4 << 20


class Executor(Protocol):
    name: str

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]: ...


def available_memory() -> int:
    """Bytes of memory available now (``MemAvailable``), or 4 GiB where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 << 30


def file_size(path: str | Path) -> int:
    """Bytes of a local file; 0 where it is not one (a URL, a missing file)."""
    p = Path(path)
    return p.stat().st_size if p.is_file() else 0


def peak_bytes(path: str | Path, size: int | None = None) -> int:
    """Estimated peak memory of loading one trace file (of ``size`` bytes,
    when known without a stat: a remote object's listed size)."""
    p = Path(path)
    size = file_size(p) if size is None else size
    factor = next(
        (f for suffix, f in PEAK_PER_BYTE.items() if p.name.endswith(suffix)), 8.0
    )
    return int(size * factor)


def pool_size(
    paths: Sequence[str | Path],
    memory_budget: int | None = None,
    cpus: int | None = None,
    sizes: Sequence[int | None] | None = None,
    peaks: Sequence[int | None] | None = None,
) -> int:
    """Workers for ``paths``: at most one per core, per file, and per
    largest peak that fits in the memory budget; at least one.  A file's peak
    is ``peaks``' where it gives one (a trace read a step window at a time
    peaks at a step's memory, not its size's), else :func:`peak_bytes`."""
    if not paths:
        return 1
    cpus = cpus or os.cpu_count() or 1
    budget = (
        memory_budget
        if memory_budget is not None
        else int(available_memory() * MEMORY_SHARE)
    )
    known = sizes if sizes is not None else [None] * len(paths)
    planned = peaks if peaks is not None else [None] * len(paths)
    largest = max(peak_bytes(p, s) if k is None else k for p, s, k in zip(paths, known, planned, strict=True))
    by_memory = budget // largest if largest > 0 else cpus
    return max(1, min(cpus, len(paths), by_memory))


class LocalExecutor:
    """A process pool on this machine (inline for one worker or a tiny run)."""

    name = "local"

    def __init__(
        self, workers: int | None = None, memory_budget: int | None = None
    ) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.workers = workers
        self.memory_budget = memory_budget

    def size_for(
        self,
        paths: Sequence[str | Path],
        sizes: Sequence[int | None] | None = None,
        peaks: Sequence[int | None] | None = None,
    ) -> int:
        if self.workers is not None:
            return max(1, min(self.workers, len(paths)))
        known = sizes if sizes is not None else [None] * len(paths)
        total = sum(file_size(p) if s is None else s for p, s in zip(paths, known, strict=True))
        if total < MIN_POOL_BYTES:
            return 1
        return pool_size(paths, self.memory_budget, sizes=known, peaks=peaks)

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        # Items may say their size (a remote object's listing) and their peak (a rank read a step window at a time).
        sized = [(p, getattr(i, "size", None), getattr(i, "peak_bytes", None)) for i in items if (p := _path_of(i)) is not None]
        workers = self.size_for([p for p, _, _ in sized], [s for _, s, _ in sized], [k for _, _, k in sized])
        # memory:// lives in this process only: worker processes would see it empty.
        if workers <= 1 or any(p.startswith("memory:") for p, _, _ in sized):
            return [fn(i) for i in items]
        # spawn: polars' thread pool does not survive fork.
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=get_context("spawn")
        ) as pool:
            return list(pool.map(fn, items))


class DaskExecutor:
    """The same work on a ``dask.distributed`` cluster at ``address``.

    Before Dask's client (which retries until its timeout) the scheduler's
    port is tried once, so a wrong or dead address fails in
    ``probe_timeout_s`` at most, at once where the port is closed.  A
    scheduler that has no worker ``workers_timeout_s`` after the work was
    submitted (time for an adaptive cluster to start one) is an error, not
    a wait without end."""

    name = "dask"

    def __init__(
        self,
        address: str,
        connect_timeout_s: float = 10.0,
        probe_timeout_s: float = 3.0,
        workers_timeout_s: float = 120.0,
    ) -> None:
        self.address = address
        self.connect_timeout_s = connect_timeout_s
        self.probe_timeout_s = probe_timeout_s
        self.workers_timeout_s = workers_timeout_s

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        try:
            from distributed import Client
        except ImportError as exc:
            raise TraceError(
                self.address, "the Dask executor needs `pip install kinetolens[dask]`"
            ) from exc
        self._probe()
        try:
            client = Client(
                self.address, timeout=self.connect_timeout_s, set_as_default=False
            )
        except Exception as exc:  # noqa: BLE001 - whatever Dask raises, one line naming the address
            raise TraceError(
                self.address, f"cannot reach the Dask scheduler ({type(exc).__name__}: {exc})"
            ) from exc
        with client:
            futures = client.map(fn, list(items), pure=False)
            if not client.scheduler_info().get("workers"):
                try:
                    client.wait_for_workers(1, timeout=self.workers_timeout_s)
                except TimeoutError:
                    raise TraceError(self.address, f"the Dask scheduler has no workers (none joined in "
                                                   f"{self.workers_timeout_s:g} s)") from None  # fmt: skip
            return list(client.gather(futures))

    def _probe(self) -> None:
        """One TCP connection to the scheduler's host and port (TCP and TLS addresses)."""
        from distributed.comm.addressing import parse_address, parse_host_port

        try:
            scheme, location = parse_address(self.address)
            if scheme not in ("tcp", "tls"):
                return
            host, port = parse_host_port(location)
            if not 0 < port < 65536:
                raise ValueError(f"port {port} is not 1-65535")
        except ValueError as exc:
            raise TraceError(self.address, f"not a Dask scheduler address ({exc})") from None
        try:
            socket.create_connection((host, port), timeout=self.probe_timeout_s).close()
        except OSError as exc:
            why = exc.strerror or ("timed out" if isinstance(exc, TimeoutError) else str(exc))
            raise TraceError(self.address, f"cannot reach the Dask scheduler ({why})") from None


def _path_of(item: Any) -> str | None:
    path = getattr(item, "path", item)
    return str(path) if isinstance(path, (str, Path)) else None


def executor_for(spec: str | None = None) -> Executor:
    """The executor a ``--executor`` value names.

    ``None``: Dask at ``$DASK_SCHEDULER_ADDRESS`` when set, else local.
    ``local`` or ``local:N`` (N workers, 1 or more); ``dask://HOST:PORT``,
    ``tcp://HOST:PORT`` or ``tls://HOST:PORT``: a Dask scheduler.
    """
    if spec is None:
        env = os.environ.get(DASK_ENV)
        return DaskExecutor(env) if env else LocalExecutor()
    if spec == "local":
        return LocalExecutor()
    if spec.startswith("local:"):
        n = spec.split(":", 1)[1]
        if not n.isdigit() or int(n) < 1:
            raise TraceError(spec, "expected local:N with N a number of workers, 1 or more")
        return LocalExecutor(workers=int(n))
    if spec.startswith("dask://"):
        return DaskExecutor("tcp://" + spec[len("dask://") :])
    # (not inproc://: such a scheduler lives inside one process, and none runs in this one)
    if spec.startswith(("tcp://", "tls://")):
        return DaskExecutor(spec)
    raise TraceError(
        spec,
        "unknown executor: use local, local:N, dask://HOST:PORT or tcp://HOST:PORT",
    )
