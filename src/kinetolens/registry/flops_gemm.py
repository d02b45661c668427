"""Matrix products: 2*M*N*K FLOPs (one multiply and one add per term).

Shapes must fit, as ``torch.utils.flop_counter`` asserts: the inner
dimensions (and batch sizes) agree, or the call gets no number: recorded
arguments that do not fit are an overload the formula does not know.

A bias or ``beta*C`` added by addmm/baddbmm is read (bytes) but its M*N adds
are not counted, as ``torch.utils.flop_counter`` does: the number is the
matrix-unit work that Tensor Core peaks are quoted for.
"""

from __future__ import annotations

import math
import re

from kinetolens.registry.dtypes import SCALAR_TYPE_CODES
from kinetolens.registry.flops_base import (
    OpArgs,
    Tensor,
    Work,
    broadcast,
    register,
    size_of,
    total,
)


def _gemm(a: Tensor, b: Tensor, batch: int, m: int, n: int, k: int, extra: list[Tensor], out_dtype: str | None,
          label: str) -> Work:
    out = size_of(batch * m * n, out_dtype)
    moved = total(a.nbytes, b.nbytes, out, *(t.nbytes for t in extra))
    shape = f"{batch}x" if batch != 1 else ""
    return Work(2.0 * batch * m * n * k, moved, f"{label} 2*{shape}{m}*{n}*{k}")


def _batched_fit(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """[B, M, K] @ [B, K, N]: same batch, same inner dimension."""
    return len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]


@register("mm", "gemm")
def mm(op: OpArgs) -> Work | None:
    a, b = op.tensor(0), op.tensor(1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return None
    (m, k), (_, n) = a.shape, b.shape
    return _gemm(a, b, 1, m, n, k, [], a.dtype, "mm")


@register("addmm", "gemm")
def addmm(op: OpArgs) -> Work | None:
    bias, a, b = op.tensor(0), op.tensor(1), op.tensor(2)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return None
    (m, k), (_, n) = a.shape, b.shape
    return _gemm(a, b, 1, m, n, k, [bias] if bias else [], a.dtype, "addmm")


@register("_int_mm", "gemm")
def int_mm(op: OpArgs) -> Work | None:
    """int8 x int8 GEMM with an int32 result."""
    a, b = op.tensor(0), op.tensor(1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return None
    (m, k), (_, n) = a.shape, b.shape
    return _gemm(a, b, 1, m, n, k, [], "int32", "_int_mm")


@register(["mv", "addmv"], "gemm")
def mv(op: OpArgs) -> Work | None:
    first = 1 if op.name.endswith("addmv") else 0
    a, v = op.tensor(first), op.tensor(first + 1)
    if a is None or v is None or len(a.shape) != 2 or v.shape != (a.shape[1],):
        return None
    m, k = a.shape
    extra = [t for t in [op.tensor(0)] if first and t is not None]
    return _gemm(a, v, 1, m, 1, k, extra, a.dtype, op.name.split("::")[-1])


@register("bmm", "gemm")
def bmm(op: OpArgs) -> Work | None:
    a, b = op.tensor(0), op.tensor(1)
    if a is None or b is None or not _batched_fit(a.shape, b.shape):
        return None
    (bs, m, k), (_, _, n) = a.shape, b.shape
    return _gemm(a, b, bs, m, n, k, [], a.dtype, "bmm")


@register("baddbmm", "gemm")
def baddbmm(op: OpArgs) -> Work | None:
    c, a, b = op.tensor(0), op.tensor(1), op.tensor(2)
    if a is None or b is None or not _batched_fit(a.shape, b.shape):
        return None
    (bs, m, k), (_, _, n) = a.shape, b.shape
    return _gemm(a, b, bs, m, n, k, [c] if c else [], a.dtype, "baddbmm")


@register("addbmm", "gemm")
def addbmm(op: OpArgs) -> Work | None:
    """C + sum over the batch of A[b] @ B[b]: one [M, N] result."""
    c, a, b = op.tensor(0), op.tensor(1), op.tensor(2)
    if a is None or b is None or not _batched_fit(a.shape, b.shape):
        return None
    (bs, m, k), (_, _, n) = a.shape, b.shape
    out = size_of(m * n, a.dtype)
    moved = total(a.nbytes, b.nbytes, out, *([c.nbytes] if c else []))
    return Work(2.0 * bs * m * n * k, moved, f"addbmm 2*{bs}x{m}*{n}*{k}")


@register("_scaled_mm", "gemm")
def scaled_mm(op: OpArgs) -> Work | None:
    """Low-precision GEMM: (a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum).

    FP8 (e4m3/e5m2) operands with per-tensor, per-row or block scales; FP4
    (``float4_e2m1fn_x2``, two values per element, so K is twice the stored
    inner size) with MX / NVFP4 block scales.  The scale tensors are read:
    their bytes count (an MX block of 32 values has one 1-byte scale).
    """
    a, b = op.tensor(0), op.tensor(1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return None
    code = op.value(6)
    out_dtype = SCALAR_TYPE_CODES.get(code) if isinstance(code, int) else a.dtype
    extra = [t for t in (op.tensor(2), op.tensor(3), op.tensor(4)) if t is not None]
    (m, k), (_, n) = a.shape, b.shape
    packed = 2 if a.dtype == "fp4x2" else 1
    return _gemm(a, b, 1, m, n, k * packed, extra, out_dtype, "_scaled_mm")


@register("matmul", "gemm", composite=True)
def matmul(op: OpArgs) -> Work | None:
    """torch.matmul's broadcasting rules; the mm/bmm it calls count when recorded."""
    a, b = op.tensor(0), op.tensor(1)
    if a is None or b is None or not a.shape or not b.shape:
        return None
    sa, sb = list(a.shape), list(b.shape)
    if len(sa) == 1:
        sa = [1, *sa]
    if len(sb) == 1:
        sb = [*sb, 1]
    batch = broadcast([tuple(sa[:-2]), tuple(sb[:-2])])
    if batch is None or sa[-1] != sb[-2]:
        return None
    m, k, n = sa[-2], sa[-1], sb[-1]
    return _gemm(a, b, math.prod(batch), m, n, k, [], a.dtype, "matmul")


@register("linear", "gemm", composite=True)
def linear(op: OpArgs) -> Work | None:
    """x[..., K] @ W[N, K].T (+ bias)."""
    x, w, bias = op.tensor(0), op.tensor(1), op.tensor(2)
    if x is None or w is None or not x.shape or len(w.shape) != 2 or x.shape[-1] != w.shape[1]:
        return None
    n, k = w.shape
    rows = math.prod(x.shape[:-1])
    return _gemm(x, w, 1, rows, n, k, [bias] if bias else [], x.dtype, "linear")


_LETTERS = re.compile(r"[A-Za-z]")


@register("einsum", "gemm", composite=True)
def einsum(op: OpArgs) -> Work | None:
    """Two-operand einsum: 2 FLOPs per term of the product over every index."""
    eq, operands = op.value(0), op.tensor_list(1)
    if not isinstance(eq, str) or operands is None or len(operands) != 2 or "..." in eq:
        return None
    lhs, _, rhs = eq.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != 2:
        return None
    sizes: dict[str, int] = {}
    for term, t in zip(terms, operands):
        letters = _LETTERS.findall(term)
        if len(letters) != len(t.shape):
            return None
        for letter, size in zip(letters, t.shape):
            seen = sizes.setdefault(letter, size)
            if seen != size and 1 not in (seen, size):
                return None  # the same index with two sizes
            sizes[letter] = max(seen, size)
    out_letters = _LETTERS.findall(rhs) if "->" in eq else sorted(
        c for c in sizes if (terms[0] + terms[1]).count(c) == 1
    )
    contracted = [c for c in sizes if c not in out_letters]
    terms_total = math.prod(sizes.values())
    flops = 2.0 * terms_total if contracted else float(terms_total)
    return Work(flops, None, f"einsum {eq} 2*prod(sizes)")
