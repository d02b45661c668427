"""Which listed GPU a kernel ran on, and its name where the trace leaves it empty (ROCm)."""

from __future__ import annotations

import subprocess
import sys

import kinetolens
from kinetolens.analysis.hardware.gpu_metrics import gpu_metrics
from kinetolens.analysis.hardware.gpu_spec import gpu_spec
from kinetolens.model.devices import device_name, device_properties
from tests.conftest import trace_path

VLLM = "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"  # 8 GPUs, every name ""
SGLANG = "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"  # kernels on device 9, id 0 listed


def test_a_nameless_rocm_gpu_is_known_by_its_properties():
    trace = kinetolens.load(trace_path(VLLM))
    assert all(not d.get("name") for d in trace.devices)
    spec = gpu_spec(trace)
    assert spec is not None and spec.name == "MI300X"  # ROCm, cc 9.4, 304 CUs, 192 GiB
    assert gpu_metrics(trace)["name"].to_list() == ["AMD Instinct MI300X (by its properties)"]


def test_roofline_runs_on_the_nameless_gpu():
    run = subprocess.run([sys.executable, "-m", "kinetolens.cli.main", "roofline", trace_path(VLLM), "--no-cache"],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "names no GPU" not in run.stdout + run.stderr and "aten::mm" in run.stdout


def test_a_kernel_device_outside_the_listing_takes_the_one_listed_gpu():
    trace = kinetolens.load(trace_path(SGLANG))
    metrics = gpu_metrics(trace)
    assert metrics["device"].to_list() == [9] and [d["id"] for d in trace.devices] == [0]
    assert metrics["name"].to_list() == ["AMD Instinct MI300X"]


def test_an_unlisted_device_among_different_gpus_stays_unknown():
    devices = [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}, {"id": 1, "name": "NVIDIA A100-SXM4-40GB"}]
    assert device_properties(devices, 1)["name"].startswith("NVIDIA A100")
    assert device_properties(devices, 5) is None  # two models: no way to tell which
    assert device_name({"name": "", "warpSize": 32, "computeMajor": 9, "computeMinor": 0, "numSms": 132}) is None
