"""Named sets of CUPTI hardware counters for ``kinetolens.profile(counters=...)``.

Pure data.  Each preset answers one question about the kernels, so a user
asks for the question rather than remembering metric names.  Metric names
are those of the CUPTI range profiler (the Perfworks names Nsight Compute
also uses) plus Kineto's two aggregates: ``kineto__cuda_core_flops`` (the
sum of the ``smsp__sass_thread_inst_executed_op_{d,f,h}{add,fma,mul}``
instruction counters) and ``kineto__tensor_core_insts``
(``sm__inst_executed_pipe_tensor.sum``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

PRESETS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        # Where each kernel sits on the roofline: work (CUDA-core floating
        # point and tensor-core instructions) over DRAM traffic.
        "roofline": (
            "kineto__cuda_core_flops",
            "kineto__tensor_core_insts",
            "dram__bytes_read.sum",
            "dram__bytes_write.sum",
        ),
        # Whether matmuls reach the tensor cores: tensor-core instructions
        # against floating point work left on the CUDA cores.
        "tensor_cores": (
            "kineto__tensor_core_insts",
            "kineto__cuda_core_flops",
        ),
        # Memory-bound kernels: DRAM and L2 traffic.
        "memory": (
            "dram__bytes_read.sum",
            "dram__bytes_write.sum",
            "lts__t_bytes.sum",
        ),
    }
)

DESCRIPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "roofline": "FLOP and DRAM byte counters: arithmetic intensity per kernel",
        "tensor_cores": "tensor-core instructions vs CUDA-core floating point work",
        "memory": "DRAM and L2 bytes moved",
    }
)

#: The ``roofline`` preset for Nsight Compute (``ncu --metrics``, comma-joined):
#: kernel time, DRAM bytes, the SASS floating-point instructions Kineto's
#: ``kineto__cuda_core_flops`` sums, Tensor Core instructions, and Tensor Core
#: math per source precision (``sm__ops_path_tensor_*``, Hopper and newer:
#: drop the ``fp8`` one on older GPUs, where ncu does not know it).
NCU_ROOFLINE_METRICS: tuple[str, ...] = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    *(f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum" for p in "dfh" for op in ("add", "mul", "fma")),
    "sm__inst_executed_pipe_tensor.sum",
    *(f"sm__ops_path_tensor_src_{src}.sum" for src in ("fp64", "tf32_dst_fp32", "fp16", "bf16_dst_fp32", "fp8")),
)


def ncu_roofline_metrics(compute_capability: tuple[int, int]) -> tuple[str, ...]:
    """:data:`NCU_ROOFLINE_METRICS` for a GPU of ``compute_capability``: ncu
    refuses a metric the GPU lacks, and FP8 Tensor Cores start at 8.9."""
    if compute_capability >= (8, 9):
        return NCU_ROOFLINE_METRICS
    return tuple(m for m in NCU_ROOFLINE_METRICS if "_fp8" not in m)
