"""Mixture-of-experts layers: every token through its top-k experts' MLPs.

Each of the ``T`` tokens runs through ``k`` experts; an expert is a gated MLP
(``w13``: hidden ``H`` -> ``N13`` = 2*I for gate and up, ``w2``: ``I`` -> ``H``).
FLOPs = ``2*T*k*H*N13 + 2*T*k*I*H`` (the two grouped GEMMs; routing, the
activation and the weighted sum are O(T*k*I), not counted).  Bytes: the
hidden states and the router's output read, the output written, and the
weights of the experts the tokens reach (``min(E, T*k)`` of ``E``) read once.

Fused-experts ops take the weights as arguments (``w1 [E, N13, H]``,
``w2 [E, H, I]``) and the chosen experts (``topk_ids [T, k]``).
``vllm::moe_forward`` takes only the hidden states and the router logits
``[T, E]``; the rest is read from the ops it calls, and the call gets no
number when they do not reveal it:

* ``k``: a ``TopK`` op's ``k`` argument, or the ``[T, k]`` ids of a
  ``topk_softmax`` call;
* the expert weights: the rank-3 ``[E, ., .]`` tensors the layer views.  FP4
  weights (``uint8`` / ``float4_e2m1fn_x2``, two values a byte) store their
  inner dimension halved: the weight whose stored dims hold ``H/2`` is
  ``w13`` (inner ``H``), the one holding ``H`` is ``w2`` (inner ``2*stored``).
  Unpacked weights: the wider one is ``w13``.  Padded dimensions are counted
  as stored (the kernels compute on them).
* no weights in sight (FlashInfer / TensorRT-LLM fused kernels): ``k`` from
  the ``[T, k]`` int32 expert ids the layer allocates, and ``I`` from the
  activation buffer between its two GEMMs: a 1-byte (FP8) ``[R, I]``
  buffer beside an ``[R, H]`` one, ``R >= T*k`` rows; the experts are
  assumed gated (``N13 = 2*I``, SwiGLU) and their weights read at no less
  than FP4's half byte a value (a floor on the bytes, as bytes always are).
"""

from __future__ import annotations

from kinetolens.registry.dtypes import DTYPE_BYTES, SCALAR_TYPE_CODES
from kinetolens.registry.flops_base import OpArgs, Tensor, Work, register, total

_PACKED = ("uint8", "fp4x2")


def _moe(x: Tensor, logits_bytes: float | None, k: int, n13: int, inter: int, experts: int,
         weight_bytes: float | None, label: str) -> Work:  # fmt: skip
    tokens, hidden = x.shape[0], x.shape[-1]
    flops = 2.0 * tokens * k * hidden * n13 + 2.0 * tokens * k * inter * hidden
    used = min(experts, tokens * k) / experts if experts else 1.0
    moved = total(2 * x.nbytes if x.nbytes is not None else None, logits_bytes,
                  weight_bytes * used if weight_bytes is not None else None)  # fmt: skip
    return Work(flops, moved, f"{label} 2*T*k*H*(N13+I) T={tokens} k={k} H={hidden} N13={n13} I={inter} E={experts}")


@register(["vllm::outplace_fused_experts", "vllm::inplace_fused_experts", "aiter::fused_moe"], "moe")
def fused_experts(op: OpArgs) -> Work | None:
    """(hidden[T, H], w1[E, N13, H], w2[E, H, I], topk_weights[T, k], topk_ids[T, k], ...)."""
    x, w1, w2, ids = op.tensor(0), op.tensor(1), op.tensor(2), op.tensor(4)
    if x is None or w1 is None or w2 is None or ids is None or len(x.shape) != 2 or len(ids.shape) != 2:
        return None
    if len(w1.shape) != 3 or len(w2.shape) != 3 or w1.shape[0] != w2.shape[0]:
        return None
    hidden = x.shape[1]
    pack = 2 if w1.dtype in _PACKED and x.dtype not in _PACKED else 1
    if w1.shape[2] * pack != hidden or w2.shape[1] != hidden:
        return None
    weights = total(w1.nbytes, w2.nbytes)
    return _moe(x, ids.nbytes, ids.shape[1], w1.shape[1], w2.shape[2] * pack, w1.shape[0], weights,
                op.name.split("::")[-1])  # fmt: skip


def _topk(below: list[OpArgs], tokens: int, experts: int) -> int | None:
    for o in below:
        if o.name == "TopK" or o.name.endswith("::topk"):
            k = o.value(1)
            if isinstance(k, int) and not isinstance(k, bool) and 0 < k <= experts:
                return k
        if o.name.endswith("topk_softmax"):
            ids = o.tensor(1)
            if ids is not None and len(ids.shape) == 2 and ids.shape[0] == tokens:
                return ids.shape[1]
    for size, dtype in _allocations(below):
        if dtype == "int32" and len(size) == 2 and size[0] == tokens and 0 < size[1] <= min(experts, 32):
            return size[1]
    return None


def _allocations(below: list[OpArgs]) -> list[tuple[list[int], str | None]]:
    """(size, dtype) of the ``aten::empty`` calls below, in call order."""
    out = []
    for o in below:
        size, code = o.int_list(0), o.value(1)
        if o.name == "aten::empty" and size is not None and isinstance(code, int) and not isinstance(code, bool):
            out.append((size, SCALAR_TYPE_CODES.get(code)))
    return out


def _buffers(below: list[OpArgs], tokens: int, k: int, hidden: int) -> int | None:
    """I from an FP8 ``[R, I]`` activation buffer beside an ``[R, H]`` one (``R >= T*k``)."""
    allocs = _allocations(below)
    wide = {s[0] for s, _ in allocs if len(s) == 2 and s[1] == hidden and s[0] >= tokens * k}
    narrow = [s[1] for s, d in allocs if len(s) == 2 and s[0] in wide and d in ("uint8", "fp8") and s[1] != hidden]
    return narrow[0] if len(set(narrow)) == 1 else None


def _weights(below: list[OpArgs], experts: int, hidden: int) -> tuple[int, int, float | None] | None:
    """(N13, I, weight bytes) from the expert weights the layer's ops view."""
    shapes: dict[tuple[int, ...], Tensor] = {}
    for o in below:
        for t in o.tensors():
            if len(t.shape) == 3 and t.shape[0] == experts and t.shape not in shapes:
                shapes[t.shape] = t
    w13 = w2 = None
    n13 = inter = 0
    for shape, t in shapes.items():
        a, b = shape[1], shape[2]
        packed = t.dtype in _PACKED
        if packed and hidden % 2 == 0 and hidden // 2 in (a, b) and hidden not in (a, b):
            w13, n13 = t, b if a == hidden // 2 else a
        elif packed and hidden in (a, b):
            w2, inter = t, 2 * (a if b == hidden else b)
    if w13 is None or w2 is None:
        plain = [t for t in shapes.values() if t.dtype not in _PACKED and hidden in t.shape[1:]]
        if len(plain) != 2:
            return None
        other = [t.shape[1] if t.shape[2] == hidden else t.shape[2] for t in plain]
        (w13, n13), (w2, inter) = sorted(zip(plain, other), key=lambda p: -p[1])
    return n13, inter, total(w13.nbytes, w2.nbytes)


@register("vllm::moe_forward", "moe", needs_below=True)
def moe_forward(op: OpArgs) -> Work | None:
    """(hidden_states[T, H], router_logits[T, E], layer_name, ...): k and the experts' shapes from the ops below."""
    x, logits = op.tensor(0), op.tensor(1)
    if x is None or logits is None or len(x.shape) != 2 or len(logits.shape) != 2 or not op.below:
        return None
    tokens, experts = logits.shape
    if x.shape[0] != tokens:
        return None
    k = _topk(op.below, tokens, experts)
    if k is None:
        return None
    found = _weights(op.below, experts, x.shape[1])
    if found is not None:
        n13, inter, weights = found
        return _moe(x, logits.nbytes, k, n13, inter, experts, weights, "moe_forward")
    inter = _buffers(op.below, tokens, k, x.shape[1])
    if inter is None:
        return None
    hidden = x.shape[1]
    at_least = experts * (hidden * 2 * inter + inter * hidden) * DTYPE_BYTES["fp4"]
    return _moe(x, logits.nbytes, k, 2 * inter, inter, experts, at_least,
                "moe_forward (I from its buffers, gated and weights >= FP4 assumed)")  # fmt: skip
