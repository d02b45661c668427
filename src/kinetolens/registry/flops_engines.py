"""Inference engines' custom ops (vLLM ``_C::``/``vllm::``, AMD ``aiter::``,
SGLang ``sgl_kernel::``): GEMMs, RMSNorm, RoPE and fused activations.

The engines register these as torch custom ops, so the trace records their
tensor arguments like any aten op's.  Conventions (per element ``N`` of the
normalized / rotated / activated tensor):

* GEMM wrappers: ``x[M, K] @ W[N, K]^T`` = ``2*M*N*K`` (bias adds not
  counted, as for ``aten::addmm``).  The vLLM/aiter Python wrappers call
  ``aten::linear``/``aten::mm`` when the fallback path runs: then those count
  (the wrappers are composites).
* RMSNorm: 4*N (square, sum, scale by rstd, weight), +1 for the residual add
  of the fused add-norm variants.  Only the normalized tensors are moved:
  inference norms write no per-row statistics.
* RoPE: 3 per rotated element of query and key (two multiplies, one add);
  bytes: query and key read and written in place, the position ids and the
  cos/sin cache rows those positions gather.
* ``silu_and_mul`` / ``gelu_and_mul``: 5 per output element (the activation's
  4 plus the gating multiply); the gate-up input read, the output written.
* FP8 quantization: 2 per element (scale, round/clamp); the input read, the
  FP8 output (and any per-token scales) written.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from kinetolens.registry.flops_base import OpArgs, Tensor, Work, register, size_of, total


def _dtype_of(i: int) -> Callable[[OpArgs], str | None]:
    """The op computes in argument ``i``'s dtype (for the roofline's ceiling)."""
    return lambda op: t.dtype if (t := op.tensor(i)) is not None else None


def _fp4(op: OpArgs) -> str | None:
    """FP4 operands stored as bytes compute in FP4."""
    return "fp4x2"


def _xwt(op: OpArgs, x_at: int, w_at: int, bias_at: int | None, label: str) -> Work | None:
    """``x[..., K] @ W[N, K]^T`` with an optional bias ``[N]``."""
    x, w = op.tensor(x_at), op.tensor(w_at)
    if x is None or w is None or not x.shape or len(w.shape) != 2 or x.shape[-1] != w.shape[1]:
        return None
    bias = op.tensor(bias_at) if bias_at is not None else None
    (n, k), m = w.shape, math.prod(x.shape[:-1])
    moved = total(x.nbytes, w.nbytes, size_of(m * n, x.dtype), bias.nbytes if bias is not None else 0)
    return Work(2.0 * m * n * k, moved, f"{label} 2*{m}*{n}*{k}")


@register("vllm::rocm_unquantized_gemm", "gemm", composite=True, defers_to=["gemm"])
def rocm_unquantized_gemm(op: OpArgs) -> Work | None:
    """(x, weight[N, K], bias)."""
    return _xwt(op, 0, 1, 2, "rocm_unquantized_gemm")


@register(["aiter::gemm_a16w16", "aiter::tuned_gemm"], "gemm", composite=True, defers_to=["gemm"])
def aiter_gemm_a16w16(op: OpArgs) -> Work | None:
    """(A[M, K], B[N, K], bias, out_dtype, ...)."""
    return _xwt(op, 0, 1, 2, op.name.split("::")[-1])


# -- RMSNorm ------------------------------------------------------------------------

#: op -> (index of the input, index of the weight, tensors of the input's
#: shape read, written, fused residual add).
_RMS = {
    "_C::rms_norm": (1, 2, 1, 1, False),  # (out, input, weight, eps)
    "_C::fused_add_rms_norm": (0, 2, 2, 2, True),  # (input, residual, weight, eps), both in place
    "aiter::rms_norm": (0, 1, 1, 1, False),  # (input, weight, eps, ...) -> out
    "aiter::rmsnorm": (1, 2, 1, 1, False),  # (out, input, weight, eps)
    "aiter::rmsnorm2d_fwd": (0, 1, 1, 1, False),  # (input, weight, eps, ...) -> out
    "aiter::add_rmsnorm": (1, 4, 2, 2, True),  # (out, input, residual_in, residual_out, weight, eps)
    "aiter::rmsnorm2d_fwd_with_add": (1, 4, 2, 2, True),  # same layout
    "aiter::rmsnorm2d_fwd_with_add_ck": (1, 4, 2, 2, True),
}


def _rms(op: OpArgs) -> Work | None:
    x_at, w_at, reads, writes, add = _RMS[op.name]
    x, w = op.tensor(x_at), op.tensor(w_at)
    if x is None or w is None or not x.shape or w.shape != (x.shape[-1],):
        return None
    per = 5 if add else 4
    n = x.numel
    moved = total(x.nbytes * (reads + writes) if x.nbytes is not None else None, w.nbytes)
    return Work(float(per * n), moved, f"{op.name.split('::')[-1]} {per}*N")


for _name in _RMS:
    register(_name, "norm")(_rms)


@register(["vllm::rocm_aiter_rms_norm", "vllm::rocm_aiter_rmsnorm2d_fwd_with_add"], "norm", composite=True,
          defers_to=["norm"])  # fmt: skip
def vllm_rms_wrapper(op: OpArgs) -> Work | None:
    """vLLM's wrappers around the aiter norms: (input, [residual,] weight, eps)."""
    add = op.name.endswith("_with_add")
    x, w = op.tensor(0), op.tensor(2 if add else 1)
    if x is None or w is None or not x.shape or w.shape != (x.shape[-1],) or x.nbytes is None:
        return None
    per, copies = (5, 4) if add else (4, 2)
    return Work(float(per * x.numel), total(x.nbytes * copies, w.nbytes), f"{op.name.split('::')[-1]} {per}*N")


# -- RoPE -------------------------------------------------------------------------------


@register(["_C::rotary_embedding", "sgl_kernel::rotary_embedding", "vllm::rotary_embedding"], "rope",
          precision=_dtype_of(1))  # fmt: skip
def rotary_embedding(op: OpArgs) -> Work | None:
    """(positions[T], query[T, Hq*D], key[T, Hk*D] or None, head_size, cos_sin_cache[P, R], is_neox)."""
    pos, q, k, cache = op.tensor(0), op.tensor(1), op.tensor(2), op.tensor(4)
    if pos is None or q is None or cache is None or len(cache.shape) != 2 or not q.shape:
        return None
    tokens = pos.numel
    if math.prod(q.shape[:-1]) != tokens and q.shape[0] != tokens:
        return None
    n = q.numel + (k.numel if k is not None else 0)
    qk = total(q.nbytes, k.nbytes if k is not None else 0)
    moved = total(2 * qk if qk is not None else None, pos.nbytes, size_of(tokens * cache.shape[1], cache.dtype))
    return Work(3.0 * n, moved, "rotary_embedding 3*N(q+k)")


# -- fused activations and quantization ------------------------------------------------


@register(["_C::silu_and_mul", "_C::gelu_and_mul", "_C::gelu_tanh_and_mul", "sgl_kernel::silu_and_mul",
           "sgl_kernel::gelu_and_mul", "sgl_kernel::gelu_tanh_and_mul"], "elementwise")  # fmt: skip
def act_and_mul(op: OpArgs) -> Work | None:
    """(out[..., I], input[..., 2I])."""
    out, x = op.tensor(0), op.tensor(1)
    if out is None or x is None or not x.shape or x.shape[:-1] != out.shape[:-1] or x.shape[-1] != 2 * out.shape[-1]:
        return None
    return Work(5.0 * out.numel, total(x.nbytes, out.nbytes), f"{op.name.split('::')[-1]} 5*N(out)")


def _quant(out: Tensor | None, x: Tensor | None, scale: Tensor | None, label: str) -> Work | None:
    if out is None or x is None or out.shape != x.shape:
        return None
    return Work(2.0 * x.numel, total(x.nbytes, out.nbytes, scale.nbytes if scale is not None else 0), f"{label} 2*N")


@register(["_C::static_scaled_fp8_quant", "_C::dynamic_scaled_fp8_quant", "_C::dynamic_per_token_scaled_fp8_quant"],
          "elementwise")  # fmt: skip
def fp8_quant(op: OpArgs) -> Work | None:
    """(out, input, scale, ...)."""
    return _quant(op.tensor(0), op.tensor(1), op.tensor(2), op.name.split("::")[-1])


# -- KV-cache writes ---------------------------------------------------------------------


def _cache_write(k: Tensor | None, v: Tensor | None, cache: Tensor | None, slots: Tensor | None,
                 label: str) -> Work | None:  # fmt: skip
    """The new keys and values read and written into the cache (at its dtype), the slot ids read."""
    if k is None or v is None or cache is None or slots is None or not k.shape or k.shape[0] != slots.numel:
        return None
    written = size_of(k.numel + v.numel, cache.dtype)
    return Work(0.0, total(k.nbytes, v.nbytes, written, slots.nbytes), f"{label} copy")


@register(["_C_cache_ops::reshape_and_cache_flash", "_C_cache_ops::reshape_and_cache"], "memory")
def reshape_and_cache(op: OpArgs) -> Work | None:
    """(key[T, Hk, D], value[T, Hk, Dv], key_cache, value_cache, slot_mapping[T], kv_cache_dtype, ...)."""
    return _cache_write(op.tensor(0), op.tensor(1), op.tensor(2), op.tensor(4), op.name.split("::")[-1])


@register("sglang::store_cache", "memory")
def store_cache(op: OpArgs) -> Work | None:
    """(k[T, Hk*D], v[T, Hk*Dv], k_cache, v_cache, loc[T], ...)."""
    return _cache_write(op.tensor(0), op.tensor(1), op.tensor(2), op.tensor(4), "store_cache")


# -- quantized GEMMs ------------------------------------------------------------------------


def _scaled_gemm(op: OpArgs, a_at: int, b_at: int, b_nk: bool, fp4: bool, scales: tuple[int, ...],
                 out_at: int | None, label: str) -> Work | None:  # fmt: skip
    """``a[M, K] @ b`` (``b`` as ``[N, K]`` when ``b_nk``, else ``[K, N]``) with scale tensors read.

    FP4 operands store two values per byte (``uint8`` or ``float4_e2m1fn_x2``): K is twice the
    stored inner size.  The output is written at the ``out`` argument's dtype (bf16 when absent).
    """
    a, b = op.tensor(a_at), op.tensor(b_at)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    (m, ka), (n, kb) = a.shape, (b.shape if b_nk else b.shape[::-1])
    if ka != kb:
        return None
    k = ka * 2 if fp4 else ka
    out = op.tensor(out_at) if out_at is not None else None
    if out is not None and out.shape != (m, n):
        return None
    read = [t.nbytes for t in (op.tensor(i) for i in scales) if t is not None]
    moved = total(a.nbytes, b.nbytes, size_of(m * n, out.dtype if out is not None else "bf16"), *read)
    return Work(2.0 * m * n * k, moved, f"{label} 2*{m}*{n}*{k}")


@register("_C::cutlass_scaled_mm", "gemm", precision=_dtype_of(1))
def cutlass_scaled_mm(op: OpArgs) -> Work | None:
    """FP8/INT8: (out[M, N], a[M, K], b[K, N], a_scales, b_scales, bias)."""
    return _scaled_gemm(op, 1, 2, False, False, (3, 4, 5), 0, "cutlass_scaled_mm")


@register("_C::cutlass_scaled_fp4_mm", "gemm", precision=_fp4)
def cutlass_scaled_fp4_mm(op: OpArgs) -> Work | None:
    """NVFP4: (out[M, N], a[M, K/2], b[N, K/2], block_scale_a, block_scale_b, alpha)."""
    return _scaled_gemm(op, 1, 2, True, True, (3, 4, 5), 0, "cutlass_scaled_fp4_mm")


@register(["aiter::gemm_a8w8", "aiter::gemm_a8w8_CK", "aiter::gemm_a8w8_bpreshuffle"], "gemm")
def aiter_gemm_a8w8(op: OpArgs) -> Work | None:
    """FP8/INT8: (XQ[M, K], WQ[N, K], x_scale, w_scale, Y[M, N], bias, ...)."""
    return _scaled_gemm(op, 0, 1, True, False, (2, 3, 5), 4, op.name.split("::")[-1])


@register(["aiter::gemm_a4w4", "aiter::gemm_a4w4_asm"], "gemm", precision=_fp4)
def aiter_gemm_a4w4(op: OpArgs) -> Work | None:
    """MXFP4: (A[M, K/2], B[N, K/2], A_scale, B_scale, out[M, N], bias, ...): e8m0 scales, one per 32."""
    return _scaled_gemm(op, 0, 1, True, True, (2, 3, 5), 4, op.name.split("::")[-1])
