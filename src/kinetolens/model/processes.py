"""One process of a trace that holds several: an Nsight Systems report of a
multi-process job (``nsys profile`` over ``torchrun``, one process per GPU)
records every rank in one file.

Each host process that launched GPU work is a rank: its ops, runtime calls,
Python ranges and memory records are those with its pid, its GPU work is
what its runtime calls launched (a kernel whose launch was not recorded goes
with the one process that used its device), and its rank is its place in
pid order.  ``dist``, ``critical-path RUNDIR`` and ``report RUNDIR`` then
see the ranks they would see with one file per rank.
"""

from __future__ import annotations

import dataclasses

import polars as pl

from kinetolens.model.trace import Trace


def gpu_processes(trace: Trace) -> list[int]:
    """Pids of the host processes that launched GPU work, in order."""
    launched = trace.kernels.select("launch_id").drop_nulls().join(
        trace.runtime.select("launch_id", "pid"), on="launch_id", how="inner"
    )
    return sorted(int(p) for p in launched["pid"].unique().to_list())


def process_view(trace: Trace, pid: int) -> Trace:
    """``trace`` as the process ``pid`` saw it, as rank ``i`` of the
    :func:`gpu_processes` (its ``distributedInfo`` says so)."""
    pids = gpu_processes(trace)
    if pid not in pids:
        raise ValueError(f"process {pid} launched no GPU work in {trace.path}")
    runtime = trace.runtime.filter(pl.col("pid") == pid)
    launched = trace.kernels.filter(pl.col("launch_id").is_in(runtime["launch_id"].implode()))
    devices = set(launched["device"].drop_nulls().unique().to_list())
    owners = _device_owners(trace)
    unlaunched = trace.kernels.filter(
        pl.col("launch_id").is_null() & pl.col("device").is_in([d for d in devices if owners.get(d) == pid])
    )
    kernels = pl.concat([launched, unlaunched]).sort("ts")
    ops = trace.ops.filter(pl.col("pid") == pid)
    info = trace.metadata.get("distributedInfo")
    info = dict(info) if isinstance(info, dict) else {}
    info.update(rank=pids.index(pid), world_size=len(pids))
    return dataclasses.replace(
        trace,
        metadata={**trace.metadata, "distributedInfo": info, "process": pid},
        ops=ops,
        runtime=runtime,
        kernels=kernels,
        python=trace.python.filter(pl.col("pid") == pid),
        memory=trace.memory.filter(pl.col("pid") == pid),
        flows=trace.flows.filter(pl.col("pid") == pid),
        steps=trace.steps.filter(pl.col("step_op_id").is_in(ops["op_id"].implode())),
        device_events=trace.device_events.filter(pl.col("device").is_in(list(devices))),
        threads=trace.threads.filter(pl.col("pid") == pid),
        processes=trace.processes.filter(pl.col("pid") == pid),
        warnings=list(trace.warnings),
    )


def _device_owners(trace: Trace) -> dict[int, int]:
    """Device -> the one process whose launches ran on it (devices two processes share are left out)."""
    used = (
        trace.kernels.select("launch_id", "device").drop_nulls()
        .join(trace.runtime.select("launch_id", "pid"), on="launch_id", how="inner")
        .group_by("device").agg(pl.col("pid").unique())
    )  # fmt: skip
    return {int(d): int(p[0]) for d, p in used.iter_rows() if len(p) == 1}
