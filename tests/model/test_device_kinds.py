"""Non-CUDA devices: DMA transfers and stream waits are not compute kernels."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import polars as pl
import pytest

from kinetolens import load
from kinetolens.analysis.gputime import launch
from kinetolens.analysis.summary import attribution
from kinetolens.ingest.categories import DEVICE_SYNC, KERNEL, MEMCPY, device_kind
from tests.conftest import trace_path

MTIA = "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz"


def _device_time_by_name() -> dict[str, tuple[int, float, int]]:
    """name -> (events, total µs, total ``size`` bytes) of the MTIA device events, read from the JSON."""
    with gzip.open(trace_path(MTIA), "rt") as fh:
        events = json.load(fh)["traceEvents"]
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0])
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "mtia_ccp_events":
            out[e["name"]][0] += 1
            out[e["name"]][1] += e["dur"]
            out[e["name"]][2] += e["args"].get("size", 0)
    return {k: (int(n), us, int(size)) for k, (n, us, size) in out.items()}


def test_mtia_dma_requests_are_copies_and_event_waits_are_not_kernel_time() -> None:
    truth = _device_time_by_name()
    assert truth["event_wait"][1] > 350_000  # 48 waits, 352.6 ms: more than any compute
    trace = load(trace_path(MTIA))
    kinds = dict(trace.kernels.group_by("name").agg(pl.col("kind").cast(pl.String).unique()).iter_rows())
    assert kinds == {"dma_request": [MEMCPY], "pe_exe": [KERNEL], "merge": [KERNEL], "remote": [KERNEL]}
    waits = trace.device_events.filter(pl.col("kind") == DEVICE_SYNC)
    per_name = {name: (n, dur / 1000) for name, n, dur in waits.group_by("name").agg(pl.len(), pl.col("dur").sum()).iter_rows()}
    assert sorted(per_name) == ["event_record", "event_wait"]
    for name, (n, us) in per_name.items():
        assert n == truth[name][0] and us == pytest.approx(truth[name][1])
    compute_us = sum(truth[k][1] for k in ("pe_exe", "merge", "remote"))
    assert attribution(trace).kernel_time_us == pytest.approx(compute_us)
    # A DMA request's ``size`` is its byte count, so it has a bandwidth.
    dma = launch.memory_bandwidth(trace)
    assert dma["name"].unique().to_list() == ["dma_request"]
    assert dma.height == truth["dma_request"][0] and dma["bytes"].sum() == truth["dma_request"][2] > 0
    assert dma["memory_bw_gbps"].null_count() == 0


def test_device_kind_rule() -> None:
    frame = pl.DataFrame({
        "cat": ["mtia_ccp_events"] * 6 + ["privateuse1_kernel", "kernel", "kernel"],
        "name": ["dma_request", "event_wait", "event_record", "pe_exe", "merge", "async_merge",
                 "Wait_on_event", "dma_fill_kernel", "event_wait_kernel"],
        "kind": ["kernel"] * 9,
    })
    typed = frame.select(device_kind(pl.col("cat"), pl.col("name"), pl.col("kind")).alias("typed"))["typed"].to_list()
    # CUDA kernels keep their kind whatever their name.
    assert typed == [MEMCPY, DEVICE_SYNC, DEVICE_SYNC, KERNEL, KERNEL, KERNEL, DEVICE_SYNC, KERNEL, KERNEL]
