"""Scaled dot-product attention: the two matrix products, forward and backward.

Forward: ``Q @ K^T`` and ``P @ V`` = ``2*B*H*Lq*Lk*(Dqk + Dv)``.  Backward
recomputes ``Q @ K^T`` and does four more products (dV, dP, dQ, dK):
``2*B*H*Lq*Lk*(3*Dqk + 2*Dv)``, 2.5x the forward when the head dims match.
A causal mask skips half of the score matrix, so causal calls count half
(``torch.utils.flop_counter`` ignores ``is_causal``; kernels do skip the
masked blocks).  Softmax and scaling are not counted (they are O(Lq*Lk),
small beside the products' O(Lq*Lk*D)).

Bytes: Q, K, V (and a bias or mask) read, the output and the log-sum-exp
(fp32, one per query row) written; backward reads dO, Q, K, V, O and the
log-sum-exp and writes dQ, dK, dV.

The ``_scaled_dot_product_*`` ops take (B, H, L, D) tensors; the
``_flash_attention_*`` and ``_efficient_attention_*`` ops they call take
(B, L, H, D).
"""

from __future__ import annotations

from kinetolens.registry.flops_base import (
    OpArgs,
    Tensor,
    Work,
    register,
    size_of,
    total,
)


def _dims(q: Tensor, k: Tensor, v: Tensor, heads_second: bool) -> tuple[int, int, int, int, int, int] | None:
    """(B, H, Lq, Lk, Dqk, Dv), or None when the shapes do not fit one
    another as ``torch.utils.flop_counter`` asserts: one batch, K and V with
    the same heads and length, Q and K the same head dim, query heads a
    multiple of key/value heads (grouped-query attention)."""
    if len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        return None
    if heads_second:
        (b, h, lq, dqk), (bk, hk, lk, dk), (bv, hv, lv, dv) = q.shape, k.shape, v.shape
    else:
        (b, lq, h, dqk), (bk, lk, hk, dk), (bv, lv, hv, dv) = q.shape, k.shape, v.shape
    if not (b == bk == bv and hk == hv and lk == lv and dqk == dk) or hk <= 0 or h % hk:
        return None
    return b, h, lq, lk, dqk, dv


def _causal_note(causal: bool) -> tuple[float, str]:
    return (0.5, " /2 causal") if causal else (1.0, "")


def attention_forward(
    op: OpArgs, causal: bool, heads_second: bool, extra: list[Tensor | None], lse: bool
) -> Work | None:
    q, k, v = op.tensor(0), op.tensor(1), op.tensor(2)
    if q is None or k is None or v is None:
        return None
    dims = _dims(q, k, v, heads_second)
    if dims is None:
        return None
    b, h, lq, lk, dqk, dv = dims
    factor, note = _causal_note(causal)
    flops = 2.0 * b * h * lq * lk * (dqk + dv) * factor
    out = size_of(b * h * lq * dv, q.dtype)
    lse_bytes = size_of(b * h * lq, "fp32") if lse else 0
    moved = total(q.nbytes, k.nbytes, v.nbytes, out, lse_bytes, *(t.nbytes for t in extra if t is not None))
    return Work(flops, moved, f"{op.name.split('::')[-1]} 2*B*H*Lq*Lk*(Dqk+Dv){note}")


def attention_backward(op: OpArgs, causal: bool, heads_second: bool, first: int) -> Work | None:
    """``first``: index of grad_out; q, k, v follow it."""
    go, q, k, v = (op.tensor(first + i) for i in range(4))
    if go is None or q is None or k is None or v is None:
        return None
    dims = _dims(q, k, v, heads_second)
    if dims is None:
        return None
    b, h, lq, lk, dqk, dv = dims
    if go.shape != ((b, h, lq, dv) if heads_second else (b, lq, h, dv)):
        return None  # the output's gradient has the output's shape
    factor, note = _causal_note(causal)
    flops = 2.0 * b * h * lq * lk * (3 * dqk + 2 * dv) * factor
    out = size_of(b * h * lq * dv, q.dtype)
    lse = size_of(b * h * lq, "fp32")
    moved = total(go.nbytes, q.nbytes, k.nbytes, v.nbytes, out, lse, q.nbytes, k.nbytes, v.nbytes)
    return Work(flops, moved, f"{op.name.split('::')[-1]} 2*B*H*Lq*Lk*(3*Dqk+2*Dv){note}")


@register("scaled_dot_product_attention", "attention", composite=True, defers_to=["attention", "gemm"])
def sdpa(op: OpArgs) -> Work | None:
    """(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)."""
    return attention_forward(op, op.flag(5), True, [op.tensor(3)], lse=False)


@register(["_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu"], "attention")
def sdpa_flash(op: OpArgs) -> Work | None:
    """(query, key, value, dropout_p, is_causal, ...)."""
    return attention_forward(op, op.flag(4), True, [op.tensor(5)] if "for_cpu" in op.name else [], lse=True)


@register("_scaled_dot_product_efficient_attention", "attention")
def sdpa_efficient(op: OpArgs) -> Work | None:
    """(query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, scale)."""
    return attention_forward(op, op.flag(6), True, [op.tensor(3)], lse=op.flag(4))


@register("_scaled_dot_product_cudnn_attention", "attention")
def sdpa_cudnn(op: OpArgs) -> Work | None:
    """(query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, ...)."""
    return attention_forward(op, op.flag(6), True, [op.tensor(3)], lse=op.flag(4))


@register("_flash_attention_forward", "attention")
def flash_forward(op: OpArgs) -> Work | None:
    """(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...), (B, L, H, D)."""
    return attention_forward(op, op.flag(8), False, [], lse=True)


@register(["flash_attn::_flash_attn_forward", "aiter::mha_fwd", "aiter::fmha_v3_fwd"], "attention")
def flash_attn_forward(op: OpArgs) -> Work | None:
    """flash-attn's and aiter's own ops: (q, k, v, dropout_p, softmax_scale, causal, ...), (B, L, H, D)."""
    return attention_forward(op, op.flag(5), False, [], lse=True)


@register("_efficient_attention_forward", "attention")
def efficient_forward(op: OpArgs) -> Work | None:
    """(query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_q, max_k, dropout_p,
    custom_mask_type, compute_log_sumexp, ...), (B, L, H, D); mask type 1/2 is causal."""
    mask_type = op.value(9)
    causal = isinstance(mask_type, int) and not isinstance(mask_type, bool) and mask_type != 0
    return attention_forward(op, causal, False, [op.tensor(3)], lse=op.flag(10))


@register("_scaled_dot_product_flash_attention_backward", "attention")
def sdpa_flash_backward(op: OpArgs) -> Work | None:
    """(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    is_causal, ...)."""
    return attention_backward(op, op.flag(11), True, 0)


@register("_scaled_dot_product_flash_attention_for_cpu_backward", "attention")
def sdpa_flash_cpu_backward(op: OpArgs) -> Work | None:
    """(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_mask, scale)."""
    return attention_backward(op, op.flag(7), True, 0)


@register("_scaled_dot_product_efficient_attention_backward", "attention")
def sdpa_efficient_backward(op: OpArgs) -> Work | None:
    """(grad_out, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
    grad_input_mask, is_causal, scale)."""
    return attention_backward(op, op.flag(11), True, 0)


@register("_scaled_dot_product_cudnn_attention_backward", "attention")
def sdpa_cudnn_backward(op: OpArgs) -> Work | None:
    """(grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q,
    cum_seq_k, max_q, max_k, dropout_p, is_causal, scale)."""
    return attention_backward(op, op.flag(14), True, 0)


@register("_flash_attention_backward", "attention")
def flash_backward(op: OpArgs) -> Work | None:
    """(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    is_causal, ...), (B, L, H, D)."""
    return attention_backward(op, op.flag(11), False, 0)


@register("_efficient_attention_backward", "attention")
def efficient_backward(op: OpArgs) -> Work | None:
    """(grad_out, query, key, value, bias, out, cu_seqlens_q, cu_seqlens_k, max_q, max_k, logsumexp,
    dropout_p, philox_seed, philox_offset, custom_mask_type, ...), (B, L, H, D)."""
    mask_type = op.value(14)
    causal = isinstance(mask_type, int) and not isinstance(mask_type, bool) and mask_type != 0
    return attention_backward(op, causal, False, 0)
