"""GPU spec table: matching real trace device names, user spec files, overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kinetolens
from kinetolens.errors import TraceError
from kinetolens.registry.gpus import MATCHES, PRECISIONS, SPECS, match_device
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.ingest.gpu_spec_file import read_spec_file

from tests.conftest import trace_path

H100 = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"


@pytest.mark.parametrize(
    ("rel", "device", "spec"),
    [
        ("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz", "NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("tracelens/b200/eager_trace.json.gz", "NVIDIA B200", "B200"),
        ("hta/df_index_resolver/df_index_resolver.json.gz", "Tesla V100-SXM2-32GB", "V100-SXM2"),
        ("hta/trace_diff/test/test.json.gz", "Tesla V100-SXM2-16GB", "V100-SXM2"),
        ("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", "Tesla V100-DGXS-32GB", "V100-SXM2"),
        # Meta's A100 SXM4 board with 40 GB (totalGlobalMem 42.5e9 bytes).
        ("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", "NVIDIA A100-PG509-200", "A100-SXM4-40GB"),
        ("nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite", "NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
        ("nsys/pipit_perlmutter-cloverleaf-cuda.sqlite", "NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz", "Quadro GP100", "Quadro-GP100"),
        # the newest traces: their roofline was refused as "unknown GPU"
        ("tracelens/b300/moe_05_large_capacity/moe_05_large_capacity.json.gz", "NVIDIA B300 SXM6 AC", "B300"),
        ("param/resnet_kineto/resnet_kineto.json.gz", "NVIDIA GeForce RTX 2080 Ti", "RTX-2080-Ti"),
        ("tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz", "AMD Instinct MI210", "MI210"),
    ],
)
def test_real_trace_devices_match(rel: str, device: str, spec: str) -> None:
    s = gpu_spec(kinetolens.load(trace_path(rel)))
    assert s is not None and s.name == spec and s.device_name == device and s.origin == "table"


def test_trace_records_win_over_the_table() -> None:
    """SM count and memory come from the device that ran (deviceProperties)."""
    s = gpu_spec(kinetolens.load(trace_path("tracelens/b200/eager_trace.json.gz")))
    assert s is not None and s.sms == 148 and s.memory_gb == pytest.approx(191.5, abs=0.1)
    h = gpu_spec(kinetolens.load(trace_path(H100)))
    assert h is not None and h.sms == 132 and h.memory_gb == pytest.approx(85.0, abs=0.1)


@pytest.mark.parametrize(
    ("rel", "recorded_gbps"),
    [
        ("nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite", 1555.2),
        ("nsys/pipit_perlmutter-cloverleaf-cuda.sqlite", 2039.04),
    ],
)
def test_bandwidth_agrees_with_what_nsight_recorded(rel: str, recorded_gbps: float) -> None:
    """Nsight Systems stores the device's memoryBandwidth: an independent check of the table."""
    trace = kinetolens.load(trace_path(rel))
    assert trace.devices[0]["memoryBandwidth"] / 1e9 == pytest.approx(recorded_gbps)
    s = gpu_spec(trace)
    assert s is not None and s.dram_gbps == pytest.approx(recorded_gbps, rel=1e-3)


def test_non_gpu_device_has_no_spec() -> None:
    trace = kinetolens.load(trace_path("hta/mtia_inference_trace/mtia_inference_rank_0.json.gz"))
    assert trace.devices[0]["name"] == "ARTEMIS"
    assert gpu_spec(trace) is None
    custom = gpu_spec(trace, peak_tflops=100.0, peak_gbps=800.0)
    assert custom is not None and custom.name == "custom" and custom.origin == "override"
    assert custom.peak_tflops("bf16") == 100.0 and custom.dram_gbps == 800.0


@pytest.mark.parametrize(
    ("name", "memory", "spec"),
    [
        ("NVIDIA H100 PCIe", 85_000_000_000, "H100-PCIe"),
        ("NVIDIA H100 NVL", 100_000_000_000, "H100-NVL"),
        ("NVIDIA H200", 150_000_000_000, "H200"),
        ("NVIDIA GB200", 190_000_000_000, "GB200"),
        ("NVIDIA A100-SXM4-80GB", 85_000_000_000, "A100-SXM4-80GB"),
        ("NVIDIA A100 80GB PCIe", 85_000_000_000, "A100-PCIe-80GB"),
        ("NVIDIA A100-PCIE-40GB", 42_000_000_000, "A100-PCIe-40GB"),
        ("Tesla V100-PCIE-32GB", 34_000_000_000, "V100-PCIe"),
        ("Tesla T4", 16_000_000_000, "T4"),
        ("NVIDIA A10", 24_000_000_000, "A10"),
        ("NVIDIA L4", 24_000_000_000, "L4"),
        ("NVIDIA L40S", 48_000_000_000, "L40S"),
        ("AMD Instinct MI300X", 206_000_000_000, "MI300X"),
        ("AMD Instinct MI250X", 68_000_000_000, "MI250X-GCD"),
        ("NVIDIA A10G", 24_000_000_000, None),  # a different part (AWS): not the A10 figures
        ("NVIDIA GeForce RTX 4090", 24_000_000_000, None),
    ],
)
def test_device_names(name: str, memory: int, spec: str | None) -> None:
    s = match_device(name, memory)
    assert (s.name if s else None) == spec


def test_table_holds_dense_peaks_with_sources() -> None:
    for s in SPECS.values():
        assert s.source and s.dram_gbps and s.memory_gb, s.name
        assert set(s.tflops) <= set(PRECISIONS) and all(v > 0 for v in s.tflops.values()), s.name
        tensor = [s.tflops[p] for p in ("tf32", "fp16", "bf16", "fp8", "int8") if p in s.tflops]
        assert all(t >= s.tflops["fp32"] for t in tensor), s.name
    # Dense, not "with sparsity": H100 SXM bf16 is 989.5, not the 1979 of the datasheet's headline.
    assert SPECS["H100-SXM"].tflops["bf16"] == 989.5
    assert SPECS["A100-SXM4-80GB"].tflops["tf32"] == 156.0
    assert SPECS["B200"].tflops["fp8"] == 4500.0
    # Every product the table must know is there, and every match points into the table.
    required = {"V100-SXM2", "V100-PCIe", "T4", "A10", "A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIe-40GB",
                "A100-PCIe-80GB", "L4", "L40S", "H100-PCIe", "H100-SXM", "H100-NVL", "H200", "B200", "GB200",
                "MI250X-GCD", "MI300X"}  # fmt: skip
    assert required <= set(SPECS)
    assert {name for _, _, name in MATCHES} <= set(SPECS)


def test_fp64_peak_uses_tensor_cores_where_they_exist() -> None:
    assert SPECS["A100-SXM4-40GB"].peak_tflops("fp64") == 19.5
    assert SPECS["V100-SXM2"].peak_tflops("fp64") == 7.8
    assert SPECS["V100-SXM2"].peak_tflops("bf16") is None


def test_overrides() -> None:
    trace = kinetolens.load(trace_path(H100))
    s = gpu_spec(trace, peak_tflops=700.0)
    assert s is not None and s.origin == "override" and s.name == "H100-SXM"
    assert s.peak_tflops("bf16") == 700.0 and s.peak_tflops("fp32") == 700.0
    assert s.dram_gbps == 3350.0
    b = gpu_spec(trace, peak_gbps=3000.0)
    assert b is not None and b.dram_gbps == 3000.0 and b.peak_tflops("bf16") == 989.5
    with pytest.raises(ValueError, match="peak_gbps"):
        gpu_spec(trace, peak_gbps=0)


def test_spec_file_toml_and_json(tmp_path: Path) -> None:
    trace = kinetolens.load(trace_path(H100))
    toml = tmp_path / "h100-capped.toml"
    toml.write_text('name = "H100 power-capped"\ndram_gbps = 3000\n[tflops]\nbf16 = 700\n')
    s = gpu_spec(trace, spec_fields=read_spec_file(str(toml)))
    assert s is not None and s.origin == "spec file" and s.name == "H100 power-capped"
    assert s.dram_gbps == 3000.0 and s.peak_tflops("bf16") == 700.0
    assert s.peak_tflops("fp8") == 1979.0 and s.sms == 132  # unchanged fields stay from the table
    js = tmp_path / "gpu.json"
    js.write_text(json.dumps({"tflops": {"fp32": 50}, "sms": 100}))
    j = gpu_spec(trace, spec_fields=read_spec_file(str(js)))
    assert j is not None and j.peak_tflops("fp32") == 50.0 and j.sms == 100 and j.name == "H100-SXM"
    # Overrides apply on top of a spec file.
    both = gpu_spec(trace, spec_fields=read_spec_file(str(js)), peak_gbps=1000.0)
    assert both is not None and both.dram_gbps == 1000.0 and both.peak_tflops("fp32") == 50.0


@pytest.mark.parametrize(
    ("filename", "text", "message"),
    [
        ("bad.toml", "dram_gbps = = 3", "not valid TOML"),
        ("bad.json", "{not json", "not valid JSON"),
        ("keys.toml", "bandwidth = 3000\n", "unknown GPU spec field"),
        ("prec.toml", "[tflops]\nfp12 = 3\n", "unknown precision"),
        ("neg.toml", "dram_gbps = -1\n", "positive number"),
        ("list.json", "[1, 2]", "one table"),
    ],
)
def test_bad_spec_file_is_one_line_naming_the_file(tmp_path: Path, filename: str, text: str, message: str) -> None:
    path = tmp_path / filename
    path.write_text(text)
    trace = kinetolens.load(trace_path(H100))
    with pytest.raises(TraceError) as exc:
        gpu_spec(trace, spec_fields=read_spec_file(str(path)))
    assert str(exc.value).startswith(str(path)) and message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_missing_spec_file(tmp_path: Path) -> None:
    trace = kinetolens.load(trace_path(H100))
    missing = tmp_path / "nope.toml"
    with pytest.raises(TraceError, match="not found") as exc:
        read_spec_file(str(missing))
    assert str(missing) in str(exc.value)
