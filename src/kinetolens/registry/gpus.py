"""GPU peak numbers: how close to the hardware a kernel runs needs a ceiling.

One entry per product.  Every figure is the vendor's *dense* peak (the
Tensor Core numbers NVIDIA prints "with sparsity" are halved), in TFLOP/s
(TOP/s for int8) and decimal GB/s, with the document it comes from beside
it.  Precisions:

* ``fp64``: vector (non-Tensor-Core) FP64; ``fp64_tensor`` where the GPU
  also has FP64 Tensor Cores / matrix cores (A100, H100, MI250X ...);
* ``fp32``: CUDA-core / vector FP32 (no TF32);
* ``tf32``, ``fp16``, ``bf16``, ``fp8``, ``fp6``, ``fp4``, ``int8``: Tensor
  Core / matrix core peaks (V100's fp16 is its Tensor Core peak; GP100's is
  packed FP16).  ``fp6``/``fp4`` are the block-scaled (MX / NVFP4) rates of
  GPUs that have them (Blackwell, CDNA 4); Hopper and CDNA 3 have none.

A precision the product does not have is left out, never zero.

A trace names its device in ``deviceProperties`` ("NVIDIA H100 80GB HBM3",
"Tesla V100-SXM2-32GB", "NVIDIA A100-PG509-200"); :func:`match_device`
finds the entry by ordered name patterns (plus memory size where the name
leaves 40 vs 80 GB open).  The SM count and memory size the trace records
win over the table: they describe the very device that ran.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any


from kinetolens.errors import TraceError

PRECISIONS = ("fp64", "fp64_tensor", "fp32", "tf32", "fp16", "bf16", "fp8", "fp6", "fp4", "int8")


@dataclass(frozen=True)
class GpuSpec:
    name: str
    tflops: Mapping[str, float]
    dram_gbps: float | None
    sms: int | None
    memory_gb: float | None
    source: str
    #: How this spec was found: "table", "spec file", "override".
    origin: str = "table"
    #: A single user-given ceiling that replaces every precision's peak.
    peak_override_tflops: float | None = None
    device_name: str | None = field(default=None, compare=False)

    def peak_tflops(self, precision: str) -> float | None:
        """Dense peak for ``precision`` (None when the GPU has no such unit).

        ``fp64`` answers with the FP64 Tensor Core peak where the GPU has one:
        that is what DGEMM-class kernels reach; ``tflops["fp64"]`` keeps the
        vector figure for everything else.
        """
        if self.peak_override_tflops is not None:
            return self.peak_override_tflops
        if precision == "fp64":
            return self.tflops.get("fp64_tensor", self.tflops.get("fp64"))
        return self.tflops.get(precision)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "device_name": self.device_name,
            "tflops": dict(self.tflops),
            "peak_override_tflops": self.peak_override_tflops,
            "dram_gbps": self.dram_gbps,
            "sms": self.sms,
            "memory_gb": self.memory_gb,
            "source": self.source,
            "origin": self.origin,
        }


def _spec(name: str, source: str, gbps: float, sms: int | None, memory_gb: float, **tflops: float) -> GpuSpec:
    unknown = set(tflops) - set(PRECISIONS)
    if unknown:
        raise ValueError(f"{name}: unknown precision(s) {sorted(unknown)}")
    return GpuSpec(name, MappingProxyType(dict(tflops)), gbps, sms, memory_gb, source)


# fmt: off
_A100 = {"fp64": 9.7, "fp64_tensor": 19.5, "fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0, "int8": 624.0}
_H100_SXM = {"fp64": 34.0, "fp64_tensor": 67.0, "fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5, "fp8": 1979.0, "int8": 1979.0}

def _table(*specs: GpuSpec) -> Mapping[str, GpuSpec]:
    """Specs by name; a name given twice is an error, not a silent replacement."""
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"GPU spec(s) {twice} given twice")
    return MappingProxyType({s.name: s for s in specs})


SPECS: Mapping[str, GpuSpec] = _table(
    # NVIDIA Tesla V100 GPU Accelerator datasheet (2018); 80 SMs: Volta architecture whitepaper.
    _spec("V100-SXM2", "NVIDIA Tesla V100 datasheet (SXM2)", 900.0, 80, 32.0, fp64=7.8, fp32=15.7, fp16=125.0),
    _spec("V100-PCIe", "NVIDIA Tesla V100 datasheet (PCIe)", 900.0, 80, 32.0, fp64=7.0, fp32=14.0, fp16=112.0),
    _spec("V100S-PCIe", "NVIDIA V100S datasheet", 1134.0, 80, 32.0, fp64=8.2, fp32=16.4, fp16=130.0),
    # NVIDIA T4 Tensor Core GPU datasheet; 40 SMs: Turing architecture whitepaper.
    _spec("T4", "NVIDIA T4 datasheet", 320.0, 40, 16.0, fp32=8.1, fp16=65.0, int8=130.0),
    # NVIDIA A10 Tensor Core GPU datasheet (sparse figures halved); 72 SMs: Ampere GA102 whitepaper.
    _spec("A10", "NVIDIA A10 datasheet", 600.0, 72, 24.0, fp32=31.2, tf32=62.5, fp16=125.0, bf16=125.0, int8=250.0),
    # NVIDIA A100 Tensor Core GPU datasheet (2021); 108 SMs: NVIDIA A100 Tensor Core GPU Architecture whitepaper.
    _spec("A100-SXM4-40GB", "NVIDIA A100 datasheet (SXM 40GB)", 1555.0, 108, 40.0, **_A100),
    _spec("A100-SXM4-80GB", "NVIDIA A100 datasheet (SXM 80GB)", 2039.0, 108, 80.0, **_A100),
    _spec("A100-PCIe-40GB", "NVIDIA A100 datasheet (PCIe 40GB)", 1555.0, 108, 40.0, **_A100),
    _spec("A100-PCIe-80GB", "NVIDIA A100 datasheet (PCIe 80GB)", 1935.0, 108, 80.0, **_A100),
    # NVIDIA L4 Tensor Core GPU datasheet (sparse figures halved); 58 SMs: Ada Lovelace architecture whitepaper.
    _spec("L4", "NVIDIA L4 datasheet", 300.0, 58, 24.0, fp32=30.3, tf32=60.0, fp16=121.0, bf16=121.0, fp8=242.5, int8=242.5),
    # NVIDIA L40S GPU datasheet (sparse figures halved); 142 SMs: Ada Lovelace architecture whitepaper.
    _spec("L40S", "NVIDIA L40S datasheet", 864.0, 142, 48.0, fp32=91.6, tf32=183.0, fp16=362.05, bf16=362.05, fp8=733.0, int8=733.0),
    # NVIDIA H100 Tensor Core GPU datasheet (sparse figures halved); SMs: NVIDIA H100 Tensor Core GPU Architecture whitepaper.
    _spec("H100-SXM", "NVIDIA H100 datasheet (SXM)", 3350.0, 132, 80.0, **_H100_SXM),
    _spec("H100-PCIe", "NVIDIA H100 datasheet (PCIe)", 2000.0, 114, 80.0,
          fp64=26.0, fp64_tensor=51.0, fp32=51.0, tf32=378.0, fp16=756.5, bf16=756.5, fp8=1513.0, int8=1513.0),
    _spec("H100-NVL", "NVIDIA H100 NVL product brief", 3900.0, 132, 94.0,
          fp64=30.0, fp64_tensor=60.0, fp32=60.0, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5, int8=1670.5),
    # NVIDIA H200 Tensor Core GPU datasheet (SXM; same compute as H100 SXM, sparse figures halved).
    _spec("H200", "NVIDIA H200 datasheet (SXM)", 4800.0, 132, 141.0, **_H100_SXM),
    _spec("H200-NVL", "NVIDIA H200 datasheet (NVL)", 4800.0, 132, 141.0,
          fp64=30.0, fp64_tensor=60.0, fp32=60.0, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5, int8=1670.5),
    # NVIDIA GH200 Grace Hopper Superchip datasheet, its GPU (H100-class compute, sparse figures halved):
    # 96 GB HBM3 at 4 TB/s or 144 GB HBM3e at 4.9 TB/s.
    _spec("GH200-96GB", "NVIDIA GH200 datasheet (HBM3)", 4000.0, 132, 96.0, **_H100_SXM),
    _spec("GH200-144GB", "NVIDIA GH200 datasheet (HBM3e)", 4900.0, 132, 144.0, **_H100_SXM),
    # NVIDIA HGX B200 datasheet, per GPU (1/8 of the 8-GPU board; sparse figures halved).
    _spec("B200", "NVIDIA HGX B200 datasheet (per GPU)", 8000.0, 148, 180.0,
          fp64=37.0, fp64_tensor=37.0, fp32=75.0, tf32=1125.0, fp16=2250.0, bf16=2250.0, fp8=4500.0, fp6=4500.0, fp4=9000.0, int8=4500.0),
    # NVIDIA GB200 NVL72 datasheet, per GPU (1/72 of the rack; sparse figures halved).  SM count not published.
    _spec("GB200", "NVIDIA GB200 NVL72 datasheet (per GPU)", 8000.0, None, 186.0,
          fp64=40.0, fp64_tensor=40.0, fp32=80.0, tf32=1250.0, fp16=2500.0, bf16=2500.0, fp8=5000.0, fp6=5000.0, fp4=10000.0, int8=5000.0),
    # NVIDIA HGX B300 datasheet, per GPU (1/8 of the 8-GPU board; sparse figures halved): Blackwell Ultra
    # trades FP64 (1.25 TFLOPS) and INT8 (not listed here: no dense figure published) for FP4.  148 SMs
    # as the devices report them (B300 SXM6 AC).
    _spec("B300", "NVIDIA HGX B300 datasheet (per GPU)", 8000.0, 148, 288.0,
          fp64=1.25, fp64_tensor=1.25, fp32=75.0, tf32=1125.0, fp16=2250.0, bf16=2250.0, fp8=4500.0, fp6=4500.0, fp4=13500.0),
    # NVIDIA Turing architecture whitepaper (GeForce RTX 2080 Ti, reference clocks; 68 SMs).  GeForce
    # Tensor Cores run FP16 with FP32 accumulation (PyTorch's GEMMs) at half their FP16-accumulate rate.
    _spec("RTX-2080-Ti", "NVIDIA Turing architecture whitepaper (RTX 2080 Ti)", 616.0, 68, 11.0,
          fp32=13.4, fp16=53.8, int8=215.2),
    # NVIDIA Quadro GP100 datasheet; 56 SMs: Pascal GP100 whitepaper.  No Tensor Cores (fp16 is packed FP16).
    _spec("Quadro-GP100", "NVIDIA Quadro GP100 datasheet", 717.0, 56, 16.0, fp64=5.2, fp32=10.3, fp16=20.7),
    # AMD Instinct MI250X / MI250 datasheets.  PyTorch sees each of the two GCDs as one device,
    # so these are per GCD: half the package figures (MI250X: 220 CUs, 128 GB, 3.2768 TB/s).
    _spec("MI250X-GCD", "AMD Instinct MI250X datasheet (per GCD = 1/2)", 1638.4, 110, 64.0,
          fp64=23.95, fp64_tensor=47.85, fp32=23.95, fp16=191.5, bf16=191.5, int8=191.5),
    _spec("MI250-GCD", "AMD Instinct MI250 datasheet (per GCD = 1/2)", 1638.4, 104, 64.0,
          fp64=22.65, fp64_tensor=45.25, fp32=22.65, fp16=181.05, bf16=181.05, int8=181.05),
    # AMD Instinct MI210 datasheet (CDNA 2, 104 CUs): the MI250's GCD as a PCIe card.
    _spec("MI210", "AMD Instinct MI210 datasheet", 1638.4, 104, 64.0,
          fp64=22.6, fp64_tensor=45.3, fp32=22.6, fp16=181.0, bf16=181.0, int8=181.0),
    # AMD Instinct MI300X datasheet (sparse figures halved).
    _spec("MI300X", "AMD Instinct MI300X datasheet", 5300.0, 304, 192.0,
          fp64=81.7, fp64_tensor=163.4, fp32=163.4, tf32=653.7, fp16=1307.4, bf16=1307.4, fp8=2614.9, int8=2614.9),
    # AMD Instinct MI355X datasheet (CDNA 4, sparse figures halved); no TF32 matrix rate.
    _spec("MI355X", "AMD Instinct MI355X datasheet", 8000.0, 256, 288.0,
          fp64=78.6, fp64_tensor=78.6, fp32=157.3, fp16=2516.6, bf16=2516.6, fp8=5033.2, fp6=10066.3, fp4=10066.3,
          int8=5033.2),
)
# fmt: on

_GIB = 1 << 30

#: Ordered (device-name pattern, minimum memory in GiB or None, spec name):
#: first match wins.  Product names are whole words: "GH200" is not an
#: "H200", "RTX A1000" not an "A100", "H100 NVL" not an "H100 SXM".  A name
#: whose variants differ in bandwidth and that the memory size cannot
#: settle (GH200 without ``totalGlobalMem``) gets no spec rather than a
#: neighbour's.
MATCHES: tuple[tuple[re.Pattern[str], float | None, str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), mem, name)
    for p, mem, name in (
        (r"\bV100S\b", None, "V100S-PCIe"),
        (r"\bV100-PCIE|\bV100 PCIe", None, "V100-PCIe"),
        (r"\bV100\b", None, "V100-SXM2"),  # SXM2 and DGX Station (DGXS) parts
        (r"\bT4\b", None, "T4"),
        (r"\bA100\b.*PCIE", 60, "A100-PCIe-80GB"),
        (r"\bA100\b.*PCIE", None, "A100-PCIe-40GB"),
        (r"\bA100\b", 60, "A100-SXM4-80GB"),
        (r"\bA100\b", None, "A100-SXM4-40GB"),  # SXM4-40GB and Meta's PG509-200 board
        (r"\bA10\b(?!G)", None, "A10"),
        (r"\bL40S\b", None, "L40S"),
        (r"\bL4\b", None, "L4"),
        (r"\bH100\b.*NVL", None, "H100-NVL"),
        (r"\bH100\b.*PCIE", None, "H100-PCIe"),
        (r"\bH100\b", None, "H100-SXM"),  # "H100 80GB HBM3" and "H100 SXM5"
        (r"\bGH200\b", 120, "GH200-144GB"),
        (r"\bGH200\b", 60, "GH200-96GB"),
        (r"\bH200\b.*NVL", None, "H200-NVL"),
        (r"\bH200\b", None, "H200"),
        (r"\bGB200\b", None, "GB200"),
        (r"\bB200\b", None, "B200"),
        (r"\bB300\b", None, "B300"),
        (r"\bRTX 2080 Ti\b", None, "RTX-2080-Ti"),
        (r"\bGP100\b", None, "Quadro-GP100"),
        (r"\bMI300X\b", None, "MI300X"),
        (r"\bMI210\b", None, "MI210"),
        (r"\bMI355X\b", None, "MI355X"),
        (r"\bMI250X\b", None, "MI250X-GCD"),
        (r"\bMI250\b", None, "MI250-GCD"),
    )
)


#: Devices a trace lists without a name (ROCm builds leave ``name`` empty), known by what it
#: does record: (warp size, compute capability major, minor, multiprocessors) -> table entry.
#: The AMD ISA version is the compute capability there (gfx942 -> 9.4, gfx90a -> 9.0, gfx950 -> 9.5).
BY_PROPERTIES: Mapping[tuple[int, int, int, int], str] = MappingProxyType(
    {
        (64, 9, 4, 304): "MI300X",
        (64, 9, 5, 256): "MI355X",
        (64, 9, 0, 110): "MI250X-GCD",
        (64, 9, 0, 104): "MI250-GCD",
    }
)


def identify(device: Mapping[str, Any]) -> str | None:
    """The table entry a nameless device's recorded properties fit exactly, or None."""
    key = tuple(device.get(k) for k in ("warpSize", "computeMajor", "computeMinor", "numSms"))
    return BY_PROPERTIES.get(key) if all(isinstance(v, int) for v in key) else None  # type: ignore[arg-type]


def match_device(name: str | None, memory_bytes: int | None = None) -> GpuSpec | None:
    """The table entry for a device name, or None when no pattern fits."""
    if not name:
        return None
    gib = memory_bytes / _GIB if memory_bytes else None
    for pattern, min_gib, spec_name in MATCHES:
        if not pattern.search(name):
            continue
        if min_gib is not None and (gib is None or gib < min_gib):
            continue
        return SPECS[spec_name]
    return None


def with_device(spec: GpuSpec, device: Mapping[str, Any]) -> GpuSpec:
    """The spec with the trace's own SM count and memory size, when recorded."""
    sms = device.get("numSms") or device.get("multiProcessorCount")
    mem = device.get("totalGlobalMem")
    return replace(
        spec,
        sms=int(sms) if isinstance(sms, int) and sms > 0 else spec.sms,
        memory_gb=round(mem / 1e9, 1) if isinstance(mem, int) and mem > 0 else spec.memory_gb,
        device_name=device.get("name") if isinstance(device.get("name"), str) else None,
    )


# -- which spec applies to a trace -------------------------------------------------

_FILE_KEYS = {"name", "source", "dram_gbps", "sms", "memory_gb", "tflops"}


@dataclass(frozen=True)
class SpecFields:
    """The fields of a user's GPU spec (``kinetolens.ingest.gpu_spec_file``
    reads them from a TOML or JSON file), and where they came from, named in
    every message about them."""

    source: str
    fields: Mapping[str, Any]


def _positive(path: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise TraceError(path, f"'{key}' must be a positive number, got {value!r}")
    return float(value)


def spec_from_fields(spec: SpecFields, base: GpuSpec | None) -> GpuSpec:
    """``base`` with the fields a user's spec gives replaced (tflops per precision)."""
    path, fields = spec.source, spec.fields
    unknown = sorted(set(fields) - _FILE_KEYS)
    if unknown:
        raise TraceError(path, f"unknown GPU spec field(s) {unknown}; known: {sorted(_FILE_KEYS)}")
    tflops_in = fields.get("tflops", {})
    if not isinstance(tflops_in, dict):
        raise TraceError(path, "'tflops' must be a table of precision = TFLOP/s")
    bad = sorted(set(tflops_in) - set(PRECISIONS))
    if bad:
        raise TraceError(path, f"unknown precision(s) {bad} in 'tflops'; known: {list(PRECISIONS)}")
    tflops = dict(base.tflops) if base else {}
    tflops.update({k: _positive(path, f"tflops.{k}", v) for k, v in tflops_in.items()})
    sms = fields.get("sms", base.sms if base else None)
    if "sms" in fields:
        sms = int(_positive(path, "sms", sms))
    name = fields.get("name", base.name if base else "custom")
    if not isinstance(name, str):
        raise TraceError(path, "'name' must be a string")
    return GpuSpec(
        name=name,
        tflops=MappingProxyType(tflops),
        dram_gbps=_positive(path, "dram_gbps", fields["dram_gbps"]) if "dram_gbps" in fields else (base.dram_gbps if base else None),
        sms=sms,
        memory_gb=_positive(path, "memory_gb", fields["memory_gb"]) if "memory_gb" in fields else (base.memory_gb if base else None),
        source=str(fields.get("source", f"spec file {path}")),
        origin="spec file",
        device_name=base.device_name if base else None,
    )
