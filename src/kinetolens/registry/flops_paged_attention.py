"""Attention over paged / variable-length batches (vLLM, SGLang, aiter).

An inference step packs every sequence's new tokens into one ``[T, H, D]``
query; the keys and values come from a paged KV cache.  The work depends on
how the T tokens split into sequences and how long each one's cached context
is, which the tensors do not say.  The engines' step annotation does:
``execute_<T>_context_<n>(sq..sk..sqsq..sqsk..)_generation_<m>(sq..sk..sqsq..sqsk..)``
gives, per phase, the sums over sequences of new tokens ``sq``, key tokens
``sk`` (cached prefix + new), ``sq^2`` and ``sq*sk``.

Per query-key pair the products ``Q @ K^T`` and ``P @ V`` cost
``2*(Dqk + Dv)`` per head.  Pairs (causal):

* prefill ("context"): each sequence's ``sq`` queries see its cached prefix
  and, causally, the new tokens before them: ``sq*sk - sq^2/2`` (the
  ``L^2/2`` of causal attention when there is no prefix);
* decode ("generation"): one query per sequence sees all ``sk`` keys.

So FLOPs = ``2*Hq*(Dqk+Dv)*(sum(sq*sk) - sum(sq^2)/2 + sum_decode(sq*sk))``.
Bytes: the query read and the output written once, each sequence's keys and
values read once (``sum(sk)`` tokens of the KV cache); the new keys and
values were written to the cache by a separate op.

Without a step annotation only ops whose arguments fix the split get a
number (``aiter::mha_batch_prefill`` when every sequence has the maximum
length); the others get none rather than a guess.  The older vLLM annotation
``execute_context_<n>(<sq>_<sq*sk>)_generation_<m>(<sk>)`` carries no
``sq^2``: it is read as prefills without a cached prefix (``sk = sq``).
Sliding windows and soft caps are not modelled.
"""

from __future__ import annotations

import re

from kinetolens.registry.flops_base import BatchStats, OpArgs, Tensor, Work, register, size_of, total

_PHASE = r"sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)"
_NEW = re.compile(rf"^execute_(?:\d+_)?context_(\d+)\({_PHASE}\)_generation_(\d+)\({_PHASE}\)")
_OLD = re.compile(r"^execute_(?:\d+_)?context_(\d+)\((\d+)_(\d+)\)_generation_(\d+)\((\d+)\)")


def step_batch(annotation: str) -> BatchStats | None:
    """The sequences of an engine step from its annotation's name, or None."""
    m = _NEW.match(annotation)
    if m:
        n, sq, sk, sqsq, sqsk, g, gsq, gsk, _gsqsq, gsqsk = (int(x) for x in m.groups())
        return BatchStats(n, sq, sk, sqsq, sqsk, g, gsq, gsk, gsqsk)
    m = _OLD.match(annotation)
    if m:
        n, sq, sqsk, g, gsk = (int(x) for x in m.groups())
        return BatchStats(n, sq, sq, sqsk, sqsk, g, g, gsk, gsk)
    return None


def _paged(
    op: OpArgs, q: Tensor, kv: Tensor, dv: int, out_dtype: str | None, batch: BatchStats, causal: bool, label: str
) -> Work | None:
    """``q``: [T, Hq, Dqk]; ``kv``: a key tensor ``[..., Hk, Dk]`` (its dtype and heads)."""
    if len(q.shape) != 3 or len(kv.shape) < 2 or q.shape[-1] != kv.shape[-1]:
        return None
    tokens, hq, dqk = q.shape
    hk = kv.shape[-2]
    if hk <= 0 or hq % hk or batch.context_sq + batch.decode_sq > tokens:
        return None  # the annotation is not about this call's tokens
    pairs = batch.context_sqsk - (batch.context_sqsq / 2 if causal else 0) + batch.decode_sqsk
    flops = 2.0 * hq * (dqk + dv) * pairs
    seqs_sk = batch.context_sk + batch.decode_sk
    moved = total(q.nbytes, size_of(tokens * hq * dv, out_dtype), size_of(seqs_sk * hk * (dqk + dv), kv.dtype))
    note = "sum(sq*sk)-sum(sq^2)/2" if causal else "sum(sq*sk)"
    return Work(flops, moved, f"{label} 2*Hq*(Dqk+Dv)*[{note} + decode sum(sk)]")


@register(["vllm::unified_attention_with_output", "vllm::unified_attention"], "attention", needs_batch=True)
def unified_attention(op: OpArgs) -> Work | None:
    """(query[T, Hq, D], key[T, Hk, D], value[T, Hk, Dv], [output,] layer_name, ...): causal decoder attention."""
    q, k, v = op.tensor(0), op.tensor(1), op.tensor(2)
    if q is None or k is None or v is None or op.batch is None or len(v.shape) != 3:
        return None
    out = op.tensor(3) if op.name.endswith("_with_output") else None
    return _paged(op, q, k, v.shape[-1], out.dtype if out is not None else q.dtype, op.batch, True,
                  op.name.split("::")[-1])  # fmt: skip


def _varlen(op: OpArgs, max_at: int, causal: bool, packed_kv: bool, label: str) -> Work | None:
    """(q[T, Hq, D], k, v, cu_seqlens_q[B+1], ..., max_seqlen_q at ``max_at``, max_seqlen_k after it).

    Without a step annotation: when ``T == B * max_seqlen_q`` every sequence
    has ``max_seqlen_q`` new tokens, and is read as ``max_seqlen_k`` keys
    long (for packed, unpaged keys only when they are ``B * max_seqlen_k``).
    """
    q, k, v, cu = op.tensor(0), op.tensor(1), op.tensor(2), op.tensor(3)
    if q is None or k is None or v is None or cu is None or len(q.shape) != 3 or len(cu.shape) != 1:
        return None
    batch = op.batch
    if batch is None:
        seqs, max_q, max_k = cu.shape[0] - 1, op.value(max_at), op.value(max_at + 1)
        if not isinstance(max_q, int) or not isinstance(max_k, int) or isinstance(max_q, bool) or seqs <= 0:
            return None
        if q.shape[0] != seqs * max_q or (packed_kv and k.shape[0] != seqs * max_k):
            return None  # ragged: the split is not in the arguments
        batch = BatchStats(seqs, seqs * max_q, seqs * max_k, seqs * max_q * max_q, seqs * max_q * max_k, 0, 0, 0, 0)
    return _paged(op, q, k, v.shape[-1], q.dtype, batch, causal, label)


@register("aiter::mha_batch_prefill", "attention", needs_batch=True)
def mha_batch_prefill(op: OpArgs) -> Work | None:
    """(q[T, Hq, D], k_cache, v_cache, cu_seqlens_q[B+1], kv_indptr, kv_page_indices, max_seqlen_q,
    max_seqlen_k, dropout_p, softmax_scale, logits_soft_cap, zero_tensors, is_causal, ...)."""
    return _varlen(op, 6, op.flag(12), False, "mha_batch_prefill")


@register("flash_attn::_flash_attn_varlen_forward", "attention", needs_batch=True)
def flash_attn_varlen_forward(op: OpArgs) -> Work | None:
    """(q[Tq, Hq, D], k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
    softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, return_softmax,
    block_table, ...): keys packed like the queries, or paged when a block table is given."""
    k = op.tensor(1)
    paged = op.tensor(15) is not None or (k is not None and len(k.shape) == 4)
    return _varlen(op, 5, op.flag(9), not paged, "flash_attn_varlen_forward")


@register(["_C::paged_attention_v1", "_C::paged_attention_v2", "_rocm_C::paged_attention"], "attention",
          needs_batch=True)  # fmt: skip
def paged_attention_decode(op: OpArgs) -> Work | None:
    """vLLM's decode kernels, one query token per sequence: v1 (out, query[S, Hq, D], key_cache,
    value_cache[blocks, Hk, Dv, block], ...); v2 and ROCm (out, exp_sums, max_logits, tmp_out, query,
    key_cache, value_cache, ...).  The step annotation's decode sums give the keys."""
    first = 1 if op.name.endswith("_v1") else 4
    q, kc, vc = op.tensor(first), op.tensor(first + 1), op.tensor(first + 2)
    batch = op.batch
    if q is None or kc is None or vc is None or batch is None or len(q.shape) != 3 or len(vc.shape) != 4:
        return None
    seqs, hq, d = q.shape
    hk, dv = vc.shape[1], vc.shape[2]
    if hk <= 0 or hq % hk or kc.shape[1] != hk or batch.decode_seqs == 0 or batch.decode_seqs > seqs:
        return None
    flops = 2.0 * hq * (d + dv) * batch.decode_sqsk
    moved = total(q.nbytes, size_of(seqs * hq * dv, q.dtype), size_of(batch.decode_sk * hk * (d + dv), kc.dtype))
    return Work(flops, moved, f"{op.name.split('::')[-1]} 2*Hq*(Dqk+Dv)*decode sum(sk)")
