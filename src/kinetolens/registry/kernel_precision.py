"""The precision a matrix kernel computes in, where its name declares it.

An op's inputs do not always say what its kernels compute in: a fused MoE
layer (``vllm::moe_forward``) takes bf16 hidden states, quantizes them to
FP8 inside and multiplies them with FP4 expert weights; the op records only
the bf16.  The low-precision libraries spell their operand formats in their
kernel names, and that is the precision the roofline's ceiling must follow:

* TensorRT-LLM's generated GEMMs (``trtllm-gen``, FlashInfer's MoE):
  ``bmm_<C>_<A><B>_<acc>_...`` / ``gemm_<C>_<A><B>_<acc>_...``, e.g.
  ``bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256...``: output bf16, A MXFP4
  (E2m1 with block scales), B MXFP8 (E4m3), fp32 accumulation.
* other names carrying the formats as tokens (CUTLASS' ``e4m3``,
  ``e2m1``...): the operand formats are those tokens.

A multiply runs at the rate of its widest operand (Blackwell's and CDNA's
mixed FP8/FP6/FP4 instructions run FP4 x FP8 at the FP8 rate; only FP4 x
FP4 reaches the FP4 rate), so the precision is the widest operand's:
``fp8`` for MXFP4 x MXFP8.  Names that declare nothing give None (the op's
input dtype then decides, :mod:`kinetolens.analysis.hardware.roofline`).
"""

from __future__ import annotations

import re
from functools import lru_cache

#: Format tokens -> precision, widest first.
_FORMATS = (
    ("fp32", re.compile(r"^(?:Fp32|F32)$", re.IGNORECASE)),
    ("bf16", re.compile(r"^(?:Bfloat16|Bf16)$", re.IGNORECASE)),
    ("fp16", re.compile(r"^(?:Fp16|F16|Half)$", re.IGNORECASE)),
    ("fp8", re.compile(r"^(?:Mx|Nv)?E(?:4m3|5m2)$", re.IGNORECASE)),
    ("fp6", re.compile(r"^(?:Mx|Nv)?E(?:2m3|3m2)$", re.IGNORECASE)),
    ("fp4", re.compile(r"^(?:Mx|Nv)?E2m1$", re.IGNORECASE)),
)
_ORDER = [p for p, _ in _FORMATS]
_TOKEN = r"(?:Mx|Nv)?E\dm\d|Bfloat16|Bf16|Fp16|Fp32"
#: trtllm-gen: ``bmm_<C>_<A><B>_<acc>_``.
_TRTLLM_GEN = re.compile(rf"^(?:bmm|gemm)_(?:{_TOKEN})_((?:{_TOKEN})(?:{_TOKEN}))_(?:{_TOKEN})_", re.IGNORECASE)
#: Low-precision format tokens anywhere in a name.
_LOW = re.compile(r"(?<![a-z0-9])(?:mx|nv|ue8m0x)?(e4m3|e5m2|e2m3|e3m2|e2m1)", re.IGNORECASE)


def _precision(token: str) -> str | None:
    return next((p for p, rx in _FORMATS if rx.match(token)), None)


def _widest(precisions: list[str | None]) -> str | None:
    found = [p for p in precisions if p is not None]
    return min(found, key=_ORDER.index) if found else None


@lru_cache(maxsize=65536)
def declared_precision(name: str) -> str | None:
    """The precision kernel ``name`` computes in, by its operand formats; None
    when the name does not declare low-precision operands."""
    m = _TRTLLM_GEN.match(name)
    if m:
        operands = re.findall(_TOKEN, m.group(1), re.IGNORECASE)
        return _widest([_precision(t) for t in operands])
    tokens = [t.lower() for t in _LOW.findall(name)]
    if not tokens:
        return None
    return _widest([_precision(t.upper()[0] + t[1:]) for t in tokens])
