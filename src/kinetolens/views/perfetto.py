"""The trace as Chrome trace-event JSON, annotated with kinetolens' attribution.

The file opens in ui.perfetto.dev (and chrome://tracing) like the profiler's
own, with what kinetolens worked out written into each event's ``args``, so
a kernel clicked in the timeline shows its module path, source line, op,
FLOPs, bytes, Tensor Core verdict and percent of roofline:

* slices (``ph: "X"``): ops and annotations, runtime calls, python
  functions, GPU activities and device annotations, at their recorded
  pid/tid (GPU work on the device's pid and the stream's tid);
* flows (``ph: "s"``/``"f"``): one arrow from each launching runtime call
  to each kernel it launched, from the model's ``launch_id`` link (so every
  arrow is one kinetolens attributed, including launches Kineto's own flow
  events missed); other recorded flows (forward-backward) pass through;
* counters (``ph: "C"``): GPU utilization per device in fixed time bins,
  and allocated/reserved memory per device from every allocator event;
* metadata (``ph: "M"``): process and thread names.

Times are microseconds with nanosecond decimals, as Kineto writes them.
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from kinetolens import json_codec
from kinetolens.analysis.gputime.gpu_streams import union_intervals
from kinetolens.analysis.hardware.kernels import kernel_table
from kinetolens.analysis.memory.usage import memory_curve, memory_events
from kinetolens.analysis.hardware.roofline import kernel_roofline
from kinetolens.analysis.workload.work import op_work
from kinetolens.errors import TraceError
from kinetolens.formats import LAUNCH_FLOW_CAT
from kinetolens.model.trace import Trace
from kinetolens.analysis.hardware.gpu_spec import gpu_spec

#: Utilization bins per device over the span of its GPU work.
UTILIZATION_BINS = 500
#: Bins are no shorter than this (ns), so a short trace does not get empty slivers.
MIN_BIN_NS = 10_000


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def _args(row: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """``row``'s non-null values under their display names."""
    return {label: row[col] for col, label in names.items() if row.get(col) is not None}


def _slices(frame: pl.DataFrame, cat_default: str, names: dict[str, str]) -> list[dict[str, Any]]:
    cols = ["name", "pid", "tid", "ts", "dur", *[c for c in ("cat",) if c in frame.columns], *names]
    events = []
    for row in frame.select(list(dict.fromkeys(c for c in cols if c in frame.columns))).iter_rows(named=True):
        events.append({
            "ph": "X", "name": row["name"], "cat": str(row.get("cat") or cat_default),
            "pid": row["pid"], "tid": row["tid"], "ts": _us(row["ts"]), "dur": _us(max(row["dur"] or 0, 0)),
            "args": _args(row, names),
        })  # fmt: skip
    return events


OP_ARGS = {
    "op_id": "kinetolens op_id", "external_id": "External id", "sequence_number": "Sequence number",
    "input_dims": "Input Dims", "input_types": "Input type", "module": "module", "source": "source",
    "direction": "direction", "fwd_op": "forward op", "step": "step", "flops": "flops", "work_bytes": "bytes",
}  # fmt: skip
RUNTIME_ARGS = {"correlation": "correlation", "external_id": "External id", "op_link": "op link", "module": "module", "source": "source"}
PYTHON_ARGS = {"python_id": "Python id", "python_parent_id": "Python parent id"}
KERNEL_ARGS = {
    "kernel_id": "kinetolens kernel_id", "correlation": "correlation", "external_id": "External id",
    "device": "device", "stream": "stream", "grid": "grid", "block": "block", "regs": "registers per thread",
    "smem": "shared memory", "occupancy": "est. achieved occupancy %", "bytes_moved": "bytes moved",
    "op": "op", "top_op": "top op", "fwd_op": "forward op", "sub": "sub", "dir": "direction", "step": "step",
    "module": "module", "source": "source", "params": "params", "flops": "flops", "bytes": "bytes",
    "tc": "tensor cores", "tc_reason": "tensor core reason", "precision": "precision", "bound": "bound",
    "achieved_tflops": "achieved TFLOP/s", "pct_of_roof": "% of roofline",
}  # fmt: skip
DEVICE_EVENT_ARGS = {"device": "device", "stream": "stream", "correlation": "correlation"}


def annotated_kernels(trace: Trace) -> pl.DataFrame:
    """The kernels table with kinetolens' per-kernel analysis joined on:
    attribution (kernel_table), Tensor Core verdict and, where the GPU's
    roofs are known, precision, bound and percent of roofline."""
    from kinetolens.analysis.hardware.tensor_cores import kernel_tensor_cores

    k = trace.kernels.select("kernel_id", "name", "cat", "pid", "tid", "ts", "dur", "correlation", "external_id",
                             "device", "stream", pl.col("bytes").alias("bytes_moved"))  # fmt: skip
    table = kernel_table(trace).select(
        pl.col("idx").alias("kernel_id"), "grid", "block", "regs", "smem", "occupancy", "op", "top_op", "fwd_op",
        "sub", "dir", "step", "module", "source", "params", "flops", "bytes", "tc",
    )  # fmt: skip
    k = k.join(table, on="kernel_id", how="left")
    k = k.join(kernel_tensor_cores(trace).select("kernel_id", "tc_reason"), on="kernel_id", how="left")
    spec = gpu_spec(trace)
    if spec is not None and spec.dram_gbps and (spec.tflops or spec.peak_override_tflops):
        roof = kernel_roofline(trace, spec).select("kernel_id", "precision", "bound", "achieved_tflops", "pct_of_roof")
        k = k.join(roof, on="kernel_id", how="left")
    return k.sort("kernel_id")


def _launch_flows(trace: Trace) -> list[dict[str, Any]]:
    """One s/f pair per launched kernel: runtime call -> kernel (flow id = kernel_id)."""
    launches = trace.runtime.select("launch_id", rt_pid="pid", rt_tid="tid", rt_ts="ts")
    k = trace.kernels.filter(pl.col("launch_id").is_not_null()).select("kernel_id", "launch_id", "pid", "tid", "ts")
    pairs = k.join(launches, on="launch_id", how="inner").sort("kernel_id")
    events: list[dict[str, Any]] = []
    for r in pairs.iter_rows(named=True):
        fid = int(r["kernel_id"])
        events.append({"ph": "s", "id": fid, "name": "launch", "cat": LAUNCH_FLOW_CAT,
                       "pid": r["rt_pid"], "tid": r["rt_tid"], "ts": _us(r["rt_ts"])})  # fmt: skip
        events.append({"ph": "f", "bp": "e", "id": fid, "name": "launch", "cat": LAUNCH_FLOW_CAT,
                       "pid": r["pid"], "tid": r["tid"], "ts": _us(r["ts"])})  # fmt: skip
    return events


def _other_flows(trace: Trace) -> list[dict[str, Any]]:
    """The recorded flows (forward-backward; the model keeps no launch arrows), as recorded.

    Their ids live in a separate numbering from the launch arrows' kernel
    ids; Perfetto keys flows by (cat, id), so the two cannot collide.
    """
    events = []
    for r in trace.flows.iter_rows(named=True):
        e = {"ph": str(r["ph"]), "id": r["id"], "name": str(r["cat"]), "cat": str(r["cat"]),
             "pid": r["pid"], "tid": r["tid"], "ts": _us(r["ts"])}  # fmt: skip
        if e["ph"] == "f":
            e["bp"] = "e"
        events.append(e)
    return events


def utilization_bins(trace: Trace) -> pl.DataFrame:
    """``pid, device, ts, utilization``: percent of each bin some GPU activity covered, per device."""
    k = trace.kernels.filter(pl.col("dur") > 0).select("pid", "device", "ts", end=pl.col("ts") + pl.col("dur"))
    rows: list[tuple[int, int, int, float]] = []
    for (pid, device), part in k.group_by("pid", "device", maintain_order=True):
        merged = union_intervals(part, by=[]).sort("ts")
        lo, hi = int(merged["ts"].min()), int(merged["end"].max())  # type: ignore[arg-type]
        width = max(MIN_BIN_NS, -(-(hi - lo) // UTILIZATION_BINS))
        busy = [0] * (-(-(hi - lo) // width) or 1)
        for start, end in merged.select("ts", "end").iter_rows():
            b = (start - lo) // width
            while start < end:
                edge = min(end, lo + (b + 1) * width)
                busy[b] += edge - start
                start, b = edge, b + 1
        rows.extend((pid, device, lo + i * width, 100.0 * ns / width) for i, ns in enumerate(busy))
        rows.append((pid, device, lo + len(busy) * width, 0.0))
    schema = {"pid": pl.Int64, "device": pl.Int64, "ts": pl.Int64, "utilization": pl.Float64}
    return pl.DataFrame(rows, schema=schema, orient="row")


def _counters(trace: Trace) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for pid, device, ts, util in utilization_bins(trace).iter_rows():
        events.append({"ph": "C", "name": f"GPU {device} utilization (%)", "pid": pid, "tid": 0, "ts": _us(ts),
                       "args": {"utilization": round(util, 3)}})  # fmt: skip
    mem = memory_events(trace)
    # memory_curve keeps the events' rows in order, so their pids line up.
    curve = memory_curve(mem).with_columns(pid=mem["pid"]) if mem.height else None
    for r in curve.iter_rows(named=True) if curve is not None else ():
        args = {"allocated MiB": round(r["allocated"] / 2**20, 4)}
        if r["reserved"] is not None:
            args["reserved MiB"] = round(r["reserved"] / 2**20, 4)
        events.append({"ph": "C", "name": f"{r['device']} memory", "pid": r["pid"], "tid": 0,
                       "ts": _us(r["ts"]), "args": args})  # fmt: skip
    return events


def _metadata(trace: Trace) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for pid, name, labels in trace.processes.iter_rows():
        if name is not None:
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        if labels is not None:
            events.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": labels}})
    for pid, tid, name in trace.threads.iter_rows():
        if name is not None:
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
    return events


def chrome_trace(trace: Trace) -> dict[str, Any]:
    """The annotated Chrome trace-event document (``traceEvents`` plus metadata)."""
    work = op_work(trace).select("op_id", "flops", work_bytes="bytes")
    ops = trace.ops.with_columns(pl.col("direction").cast(pl.String)).join(work, on="op_id", how="left")
    runtime = trace.runtime
    device_events = trace.device_events
    events = _metadata(trace)
    events += _slices(ops, "cpu_op", OP_ARGS)
    events += _slices(runtime, "cuda_runtime", RUNTIME_ARGS)
    events += _slices(trace.python, "python_function", PYTHON_ARGS)
    events += _slices(annotated_kernels(trace), "kernel", KERNEL_ARGS)
    events += _slices(device_events, "gpu_user_annotation", DEVICE_EVENT_ARGS)
    events += _launch_flows(trace)
    events += _other_flows(trace)
    events += _counters(trace)
    keep = ("schemaVersion", "deviceProperties", "distributedInfo", "cuda_runtime_version", "cuda_driver_version")
    doc: dict[str, Any] = {k: trace.metadata[k] for k in keep if k in trace.metadata}
    doc["displayTimeUnit"] = "ms"
    doc["otherData"] = {"source": trace.path, "annotated_by": "kinetolens"}
    doc["traceEvents"] = events
    return doc


def write_chrome_trace(trace: Trace, path: str | Path, extra_events: Sequence[dict] = ()) -> int:
    """Write :func:`chrome_trace` plus ``extra_events`` (tracks of other views)
    (gzip when ``path`` ends in ``.gz``); returns the event count."""
    doc = chrome_trace(trace)
    doc["traceEvents"] += extra_events
    payload = json_codec.encode(doc)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)  # as the table exports do
        if str(path).endswith(".gz"):
            with gzip.open(path, "wb", compresslevel=6) as fh:
                fh.write(payload)
        else:
            Path(path).write_bytes(payload)
    except OSError as exc:
        raise TraceError(path, f"cannot write trace ({exc.strerror or exc})") from None
    return len(doc["traceEvents"])
