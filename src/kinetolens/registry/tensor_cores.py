"""Does a kernel run on Tensor Cores (NVIDIA) or Matrix Cores (AMD)?  Rules by name.

A kernel's name is the only evidence most traces carry, and the libraries
name their kernels systematically: cuBLAS/cuDNN ``xmma``/``hmma``/``h884``
/``s1688``/``nvjet`` kernels, CUTLASS ``tensorop``/``wmma``/``gmma`` kernels,
flash attention, ROCm ``MFMA``/``xdl``.  The verdict is three-valued:

* ``yes``: the name says the kernel issues matrix instructions;
* ``no``: the name says it cannot (elementwise, reductions, copies,
  communication, CUDA-core ``sgemm``/``scudnn``, ``simt`` CUTLASS, ...);
* ``unknown``: the name does not tell.  A guess would make a wrong
  "Tensor Core time" figure look exact, so we do not guess.

``RULES`` is ordered and the first match wins, so a narrow exception (a
SIMT CUTLASS kernel, the FFMA flavour of an ``xmma`` kernel, the split-K
reduction after a tensor-op GEMM) sits before the broad rule it overrides.
Adding a kernel family is one entry.  Hardware counters, when a trace has
them, override the name (see :func:`verdict_from_counters`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

YES = "yes"
NO = "no"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    verdict: str
    reason: str


def _rule(pattern: str, verdict: str, reason: str) -> Rule:
    return Rule(re.compile(pattern, re.IGNORECASE), verdict, reason)


#: Ordered (pattern, verdict, reason); first match wins.
RULES: tuple[Rule, ...] = (
    # -- narrow exceptions to the broad "yes" families below -----------------
    _rule(r"simt", NO, "CUTLASS SIMT kernel: CUDA-core FMA"),
    _rule(r"xmma.*_ffma|ffma.*xmma", NO, "xmma FFMA variant: fp32 on CUDA cores"),
    _rule(r"splitKreduce|ReduceSplitK|split_k_reduce|splitk_reduce", NO, "split-K reduction after a GEMM"),
    _rule(r"compute\w*OffsetsKernel", NO, "cuDNN index precomputation helper"),
    _rule(r"nchwToNhwc|nhwcToNchw", NO, "layout transform"),
    _rule(r"epilogue::impl::globalKernel", NO, "cuBLASLt standalone epilogue"),
    _rule(r"fmha_cutlass[FB]_f32", UNKNOWN, "fp32 memory-efficient attention: SIMT or TF32 depends on the build"),
    _rule(r"nvjet_[sd]{3}_", UNKNOWN, "fp32/fp64 nvjet variant: FMA or Tensor Core pipe not named"),
    _rule(r"tinygemm|_weight_int4pack_mm|int4mm", YES, "PyTorch int4 GEMM (mma.sync)"),
    # Inductor names a kernel after the ops it fused: "fmha", "mm" in a
    # pointwise or reduction kernel's name say nothing about the kernel.
    _rule(r"^triton_(poi|red|per)_", NO, "Triton pointwise / reduction kernel"),
    _rule(r"^SubTensorOp|^Op(\dd)?Tensor", NO, "MIOpen tensor arithmetic (elementwise)"),
    _rule(r"Im2d2Col|Col2Im2d", NO, "MIOpen im2col / col2im transform"),
    # -- matrix-instruction families -----------------------------------------
    _rule(r"xmma", YES, "cuBLAS/cuDNN xmma kernel (MMA instructions)"),
    _rule(r"w?gmma|warpgroup", YES, "Hopper warpgroup MMA (wgmma)"),
    _rule(r"[hid]mma|tcgen05", YES, "MMA instruction named in the kernel (hmma/imma/dmma/tcgen05)"),
    _rule(r"wmma", YES, "WMMA (Tensor Core API)"),
    # Not ``ck::tensor_operation``: every composable-kernel name has that namespace.
    _rule(r"tensorop|tensor_op(?!eration)|MmaTensorOp", YES, "CUTLASS tensor-op kernel"),
    _rule(r"nvjet", YES, "cuBLAS nvjet GEMM (Hopper/Blackwell Tensor Cores)"),
    _rule(
        r"[hsicdz](?:884|1688|16816|8816|16832|161616)(?!\d)|tensor\d+x\d+x\d+",
        YES,
        "MMA shape in the name (h884/s1688/i8816/16816 ...)",
    ),
    _rule(r"flash_fwd|flash_bwd|flash::|flash_attn|flashattn|fmha|_sdpa_|sdpa_", YES, "flash / fused attention kernel"),
    _rule(r"(^|_)(bmm|gemm|batchedGemm)_.*_sm1\d\d[af]?$", YES, "TensorRT-LLM GEMM for sm100 (tcgen05)"),
    _rule(r"^Cijk_.*(MFMA|_MI\d+x\d+x\d+)", YES, "rocBLAS/hipBLASLt Tensile kernel with MFMA"),
    _rule(r"xdl|xdlops|mfma", YES, "ROCm composable-kernel XDL / MFMA kernel"),
    _rule(r"^igemm_\w+_gtcx", YES, "MIOpen implicit-GEMM convolution on xdlops (gtcx: MFMA)"),
    # -- CUDA-core math libraries ------------------------------------------------
    _rule(r"(maxwell|kepler|pascal|volta|turing)_(s|d|c|z|gc|gz)(gemm|cudnn|scudnn)", NO, "CUDA-core cuBLAS/cuDNN kernel"),
    _rule(r"ampere_(s|c|gc)(gemm|cudnn|scudnn)|_scudnn_", NO, "CUDA-core fp32/complex cuBLAS/cuDNN kernel"),
    _rule(r"gemv|gemmSN_|gemmk1_|dot_kernel|axpy|scal_kernel", NO, "BLAS level-1/2 or K=1 / small-N kernel (CUDA cores)"),
    _rule(r"sgemm|convolve_sgemm|magma_sgemm", NO, "fp32 SGEMM on CUDA cores"),
    _rule(r"wgrad_alg\d_engine|dgrad_engine|dgrad2d|fft2d|fft_|winograd|im2col|col2im|reduce_wgrad|scalePackedTensor",
        NO,
        "legacy cuDNN engine / transform / scaling on CUDA cores",
    ),
    _rule(r"bn_fw|bn_bw|batch_?norm|layer_?norm|rms_?norm|group_?norm|qk_?norm|GammaBeta|RowwiseMoments|MomentsCUDA", NO, "normalization"),
    # -- everything that is not a matrix product -------------------------------
    _rule(r"^nccl|ncclDevKernel|ncclKernel|all_?reduce|allgather|all_gather|reduce_scatter|multimem|cross_device", NO, "communication"),
    _rule(r"^(Memcpy|Memset)|memcpy|memset|copy_page|CatArray|_copy_|copy_kernel|direct_copy", NO, "copy / fill"),
    _rule(r"^dma_|event_record|event_wait|spin_kernel", NO, "DMA / synchronization"),
    _rule(
        r"at::native::|at::cuda::|at_cuda_detail::|cub::|thrust::|c10::cuda::|cunn_",
        NO,
        "ATen / CUB kernel (elementwise, reduction, indexing, sort, softmax)",
    ),
    _rule(
        r"elementwise|reduce_kernel|softmax|dropout|embedding|scatter|gather|index|permute|transpose|"
        r"rotary|(?<![a-z])rope_|quantiz|dequant|fp8_quant|FP8rowwise_to|qparam|reshape_and_cache|routing|finalizeKernel|topk|radix|scan|sort|histogram|"
        r"multi_tensor_apply|adam|bounds_check|offsets_range|searchsorted|to_dense|recat|Criterion|"
        r"pool|upsample|clamp|relu|gelu|silu|^void compute_cuda_kernel<",
        NO,
        "elementwise / reduction / indexing kernel",
    ),
)

#: Input dtypes PyTorch's matrix ops (GEMM, convolution, attention) run on
#: Tensor Cores by default wherever the GPU has them for that dtype.  fp32
#: is not one: TF32 matmuls are off by default, so an fp32 GEMM may run on
#: either unit.  fp64 neither: DGEMM may or may not use FP64 Tensor Cores.
DEFAULT_TENSOR_CORE_DTYPES = frozenset({"fp16", "bf16", "fp8", "fp4x2", "int8", "uint8"})
#: Matrix ops whose CUDA kernels run on CUDA cores whatever the dtype
#: (matrix-vector products, depthwise convolutions).
CUDA_CORE_MATRIX_OPS = frozenset({"aten::mv", "aten::addmv", "aten::_conv_depthwise2d", "aten::miopen_depthwise_convolution"})

#: CUPTI counters that count Tensor Core (pipe) instructions.  Kineto's
#: ``kineto__tensor_core_insts`` expands to ``sm__inst_executed_pipe_tensor.sum``.
TENSOR_COUNTER = re.compile(r"pipe_tensor|tensor_op|kineto__tensor_core_insts|inst_executed_op_[hid]mma", re.IGNORECASE)
#: Tensor Core math ops (an FMA counting 2) per source type, Nsight
#: Compute's ``sm__ops_path_tensor_src_<type>[_dst_<type>].sum`` (not its
#: per-instruction or per-sparsity splits of the same ops); of floating-point
#: sources (``fp``, ``bf``, ``tf``) they are FLOPs, of ``int`` integer ops.  Where counted it
#: decides the verdict before :data:`TENSOR_COUNTER`: the tensor pipe also
#: issues some plain half-precision FMAs (HFMA2.MMA), so an elementwise
#: kernel can show tensor-pipe instructions and no matrix math at all.
TENSOR_FLOP_COUNTER = re.compile(r"^sm__ops_path_tensor_src_[a-z0-9]+(?:_dst_[a-z0-9]+)?\.sum$")


#: Names longer than this are classified by their head and tail only.  Real
#: kernel names (C++ templates included) stay under ~6 KiB; a rule's cost
#: grows with the text it searches (one is quadratic in the worst case), so
#: a corrupt or hostile multi-megabyte name must not be searched whole.
MAX_CLASSIFIED_NAME = 16384
_NAME_HEAD = 12288
_NAME_TAIL = 4096


def classified_text(name: str) -> str:
    """The part of ``name`` the rules see: all of it, or its head and tail.

    The two ends are joined by a newline, which ``.`` does not match, so no
    rule matches across the cut; ``^`` still anchors at the head and ``$``
    at the tail.
    """
    if len(name) <= MAX_CLASSIFIED_NAME:
        return name
    return name[:_NAME_HEAD] + "\n" + name[-_NAME_TAIL:]


@lru_cache(maxsize=65536)
def classify(name: str | None) -> tuple[str, str]:
    """(verdict, reason) for one kernel name; ``unknown`` when no rule matches."""
    if not name:
        return UNKNOWN, "no kernel name"
    text = classified_text(name)
    for rule in RULES:
        if rule.pattern.search(text):
            return rule.verdict, rule.reason
    return UNKNOWN, "no rule matches the name"


def deciding_tensor_counters(metrics: Iterable[str]) -> list[str]:
    """The counters among ``metrics`` that decide a kernel's Tensor Core
    verdict: its Tensor Core math (:data:`TENSOR_FLOP_COUNTER`) where
    recorded, else its Tensor Core instructions (:data:`TENSOR_COUNTER`)."""
    names = list(metrics)
    math = [m for m in names if TENSOR_FLOP_COUNTER.match(m)]
    return math or [m for m in names if TENSOR_COUNTER.search(m)]


def tensor_counters(values: Mapping[str, float | None]) -> dict[str, float]:
    """The deciding Tensor Core counters among a kernel's counter values."""
    deciding = set(deciding_tensor_counters(k for k, v in values.items() if v is not None))
    return {k: float(v) for k, v in values.items() if k in deciding}


def verdict_from_counters(values: Mapping[str, float | None]) -> str | None:
    """``yes``/``no`` from measured Tensor Core math or instructions; None if none measured."""
    measured = tensor_counters(values)
    if not measured:
        return None
    return YES if any(v > 0 for v in measured.values()) else NO
