"""Which GPU's ceilings apply to a trace: the table entry for its device, a
user's spec file, or single-number overrides."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

import polars as pl

from kinetolens.analysis.session import per_trace
from kinetolens.model.trace import Trace
from kinetolens.model.devices import device_name, device_properties
from kinetolens.registry.gpus import SPECS, GpuSpec, SpecFields, identify, match_device, spec_from_fields, with_device


def trace_device(trace: Trace) -> dict[str, Any] | None:
    """The listed properties of the GPU that ran the most kernel time (the first listed one otherwise),
    with ``name`` filled in where the trace left it empty and its properties identify the model."""
    if not trace.devices:
        return None
    chosen = None
    k = trace.kernels
    if k.height:
        busiest = k.group_by("device").agg(pl.col("dur").sum()).sort("dur", descending=True)["device"].drop_nulls()
        for dev_id in busiest.to_list():
            chosen = device_properties(trace.devices, dev_id)
            if chosen is not None:
                break
    chosen = dict(chosen if chosen is not None else trace.devices[0])
    name = device_name(chosen)
    if not name:
        return None
    return {**chosen, "name": name}


@per_trace
def device_spec(trace: Trace) -> GpuSpec | None:
    """The table entry for the trace's device, with the trace's own SM count and
    memory size (None when the table does not know it), once per trace."""
    device = trace_device(trace)
    spec = match_device(device.get("name"), device.get("totalGlobalMem")) if device else None
    if spec is None and device is not None and identify(device):
        spec = SPECS[identify(device)]  # a nameless ROCm device, known by its properties
    if spec is not None and device is not None:
        spec = with_device(spec, device)
    return spec


def gpu_spec(
    trace: Trace,
    spec_fields: SpecFields | None = None,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
) -> GpuSpec | None:
    """The ceilings to compare this trace's kernels with, or None if unknown.

    Order: the table entry matching the trace's device (with the trace's own
    SM count and memory size), then a user spec's fields (read from a file
    with ``kinetolens.ingest.gpu_spec_file.read_spec_file``), then the
    single-number overrides (``peak_tflops`` replaces every precision's peak,
    ``peak_gbps`` the DRAM bandwidth).  A bad field raises
    :class:`TraceError` naming the spec's source.
    """
    for label, value in (("peak_tflops", peak_tflops), ("peak_gbps", peak_gbps)):
        if value is not None and (isinstance(value, bool) or not value > 0):
            raise ValueError(f"{label} must be a positive number, got {value!r}")
    spec = device_spec(trace)
    if spec_fields is not None:
        spec = spec_from_fields(spec_fields, spec)
    if peak_tflops is None and peak_gbps is None:
        return spec
    base = spec or GpuSpec("custom", MappingProxyType({}), None, None, None, "user override")
    return replace(
        base,
        peak_override_tflops=float(peak_tflops) if peak_tflops is not None else base.peak_override_tflops,
        dram_gbps=float(peak_gbps) if peak_gbps is not None else base.dram_gbps,
        origin="override",
    )
