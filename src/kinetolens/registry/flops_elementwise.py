"""Elementwise ops, reductions, copies, gathers, dropout and optimizer steps.

Elementwise: ``per * numel(output)`` FLOPs, ``per`` = 1 for every unary and
binary op (a transcendental like ``exp`` counts one, as most tools do), 3
for ``lerp`` and for ``addcmul``/``addcdiv`` with a ``value`` other than 1
(else 2).  The output shape is the broadcast of the tensor inputs; its dtype
the promoted one (bool for comparisons).  In-place forms write ``self``.

Reductions: 1 FLOP per input element (3 for var/std), output = input with
the reduced dims removed.  Copies, fills and gathers move bytes and do no
FLOPs; a gather reads the rows it takes (not the whole table).

Optimizer steps (fused and foreach): FLOPs per parameter element (Adam 13,
+2 with L2 weight decay, AdamW +1 for its decoupled decay; SGD 2, +2 with
momentum, +2 with weight decay).  Tensor lists record no dtypes, so their
bytes stay unknown.
"""

from __future__ import annotations

import math

from kinetolens.registry.dtypes import SCALAR_TYPE_CODES
from kinetolens.registry.flops_base import (
    OpArgs,
    Work,
    broadcast,
    register,
    result_dtype,
    size_of,
    total,
)

UNARY = ["abs", "neg", "negative", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "logit", "erf", "erfc", "erfinv", "relu", "relu6", "gelu", "silu", "mish", "hardswish", "hardsigmoid", "hardtanh", "elu", "selu", "celu", "leaky_relu", "softplus", "softshrink", "hardshrink", "threshold", "sign", "sgn", "floor", "ceil", "round", "trunc", "frac", "clamp", "clamp_min", "clamp_max", "clip", "square", "bitwise_not", "nan_to_num"]
BINARY = ["add", "sub", "subtract", "rsub", "mul", "multiply", "div", "divide", "true_divide", "floor_divide", "remainder", "fmod", "pow", "float_power", "maximum", "minimum", "fmax", "fmin", "atan2", "hypot", "xlogy", "copysign", "bitwise_and", "bitwise_or", "bitwise_xor", "masked_fill", "where", "threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward", "hardtanh_backward", "leaky_relu_backward", "elu_backward", "softplus_backward", "hardswish_backward", "hardsigmoid_backward", "mish_backward"]
COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf", "isfinite", "isneginf", "isposinf"]
TERNARY = {"lerp": 3, "addcmul": 2, "addcdiv": 2}

#: FLOPs per output element of elementwise ops with a count other than 1
PER_ELEMENT: dict[str, int] = {**TERNARY, "where": 1}


def _base(name: str) -> str:
    short = name.split("::")[-1]
    return short[:-1] if short.endswith("_") and not short.endswith("__") else short


def elementwise(op: OpArgs) -> Work | None:
    base = _base(op.name)
    inplace = op.name.endswith("_") and not op.name.endswith("__")
    tensors = op.tensors()
    if not tensors:
        return None
    shape = broadcast(t.shape for t in tensors)
    if shape is None:
        return None
    numel = math.prod(shape)
    if inplace and op.tensor(0) is not None:
        out_dtype = op.tensor(0).dtype  # type: ignore[union-attr]
    elif base in COMPARISONS:
        out_dtype = "bool"
    else:
        out_dtype = result_dtype(tensors)
    per = PER_ELEMENT.get(base, 1)
    if base in ("addcmul", "addcdiv"):
        value = op.value(3)
        per += 1 if isinstance(value, (int, float)) and not isinstance(value, bool) and value != 1 else 0
    moved = total(*(t.nbytes for t in tensors), size_of(numel, out_dtype))
    return Work(float(per * numel), moved, f"{base} {per}*out")


for _name in UNARY + BINARY + COMPARISONS + list(TERNARY):
    register([_name, f"{_name}_"], "elementwise")(elementwise)


@register(["fill_", "zero_", "normal_", "uniform_", "bernoulli_", "random_"], "memory")
def fill(op: OpArgs) -> Work | None:
    """Writes ``self`` without reading it."""
    x = op.tensor(0)
    return None if x is None else Work(0.0, x.nbytes, f"{_base(op.name)} write")


@register("copy_", "memory")
def copy_(op: OpArgs) -> Work | None:
    """(self, src, non_blocking): reads src, writes self (a dtype conversion is no FLOP)."""
    dst, src = op.tensor(0), op.tensor(1)
    if dst is None or src is None:
        return None
    return Work(0.0, total(src.nbytes, size_of(dst.numel, dst.dtype)), "copy_ read+write")


@register(["clone", "contiguous", "to", "_to_copy", "type_as"], "memory", composite=True)
def clone(op: OpArgs) -> Work | None:
    """Read once, write once; ``_to_copy``/``to`` may change the dtype."""
    x = op.tensor(0)
    if x is None:
        return None
    code = op.value(1) if op.name.endswith(("_to_copy", "::to")) else None
    out_dtype = SCALAR_TYPE_CODES.get(code, x.dtype) if isinstance(code, int) else x.dtype
    return Work(0.0, total(x.nbytes, size_of(x.numel, out_dtype)), f"{_base(op.name)} read+write")


@register("index_select", "memory")
def index_select(op: OpArgs) -> Work | None:
    """(self, dim, index): reads the selected slices and the index, writes them."""
    x, dim, index = op.tensor(0), op.value(1), op.tensor(2)
    if x is None or index is None or not isinstance(dim, int) or not -len(x.shape) <= dim < len(x.shape):
        return None
    shape = list(x.shape)
    shape[dim] = index.numel
    out = size_of(math.prod(shape), x.dtype)
    return Work(0.0, total(index.nbytes, out, out), "index_select gather")


@register("embedding", "memory", composite=True)
def embedding(op: OpArgs) -> Work | None:
    """(weight, indices, ...): gathers one row per index."""
    w, idx = op.tensor(0), op.tensor(1)
    if w is None or idx is None or len(w.shape) != 2:
        return None
    out = size_of(idx.numel * w.shape[1], w.dtype)
    return Work(0.0, total(idx.nbytes, out, out), "embedding gather")


@register("embedding_dense_backward", "memory")
def embedding_dense_backward(op: OpArgs) -> Work | None:
    """(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq): scatter-add into the table."""
    go, idx, rows = op.tensor(0), op.tensor(1), op.value(2)
    if go is None or idx is None or not isinstance(rows, int) or rows < 0 or not go.shape:
        return None
    table = size_of(rows * go.shape[-1], go.dtype)
    return Work(float(go.numel), total(go.nbytes, idx.nbytes, table), "embedding_dense_backward 1*grad")


@register("embedding_backward", "memory", composite=True)
def embedding_backward(op: OpArgs) -> Work | None:
    return embedding_dense_backward(op)


@register(["upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
           "_upsample_nearest_exact2d", "_upsample_nearest_exact3d"], "memory")
def upsample_nearest(op: OpArgs) -> Work | None:
    """(self, output_size, scales...): a gather, no arithmetic; reads the input, writes the output."""
    x, size = op.tensor(0), op.int_list(1)
    if x is None or not size or len(x.shape) != len(size) + 2 or min(size) <= 0:
        return None
    out = size_of(x.shape[0] * x.shape[1] * math.prod(size), x.dtype)
    return Work(0.0, total(x.nbytes, out), f"{_base(op.name)} read+write")


@register("cat", "memory")
def cat(op: OpArgs) -> Work | None:
    """(tensors, dim): tensor lists record no dtype, so only a known element size gives bytes."""
    parts = op.tensor_list(0)
    if parts is None:
        return None
    return Work(0.0, None, "cat read+write")


# -- reductions -------------------------------------------------------------------

REDUCTIONS = ["sum", "mean", "nansum", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "all", "any", "logsumexp", "norm", "linalg_vector_norm", "var", "std", "var_mean", "std_mean", "count_nonzero"]
_PER_REDUCED = {"var": 3, "std": 3, "var_mean": 3, "std_mean": 3, "norm": 2, "linalg_vector_norm": 2,
                "logsumexp": 3}


@register(REDUCTIONS, "reduction")
def reduction(op: OpArgs) -> Work | None:
    x = op.tensor(0)
    if x is None:
        return None
    base = _base(op.name)
    dims: object = None
    for i in range(1, len(op)):
        v = op.value(i)
        t = op.type_at(i)
        if t in ("ScalarList", "GenericList", "IntList") and isinstance(v, list):
            dims = v
            break
        single = base in ("max", "min", "argmax", "argmin", "logsumexp") and t in ("Scalar", "Int")
        if single and isinstance(v, int) and not isinstance(v, bool):
            dims = [v]
            break
    nd = len(x.shape)
    if isinstance(dims, list) and dims and nd:
        reduced = {d % nd for d in dims if isinstance(d, int)}
        out_numel = math.prod(s for k, s in enumerate(x.shape) if k not in reduced)
    else:
        out_numel = 1
    if base in ("argmax", "argmin", "count_nonzero"):
        out = size_of(out_numel, "int64")
    elif base in ("all", "any"):
        out = size_of(out_numel, "bool")
    elif base in ("max", "min") and isinstance(dims, list):
        out = total(size_of(out_numel, x.dtype), size_of(out_numel, "int64"))  # values and indices
    else:
        out = size_of(out_numel, x.dtype)
    per = _PER_REDUCED.get(base, 1)
    return Work(float(per * x.numel), total(x.nbytes, out), f"{base} {per}*in")


@register(["cumsum", "cumprod", "cumsum_", "cumprod_"], "reduction")
def scan(op: OpArgs) -> Work | None:
    x = op.tensor(0)
    return None if x is None else Work(float(x.numel), total(x.nbytes, x.nbytes), f"{_base(op.name)} 1*in")


# -- dropout --------------------------------------------------------------------


@register(["dropout", "feature_dropout", "alpha_dropout"], "dropout", composite=True)
def dropout(op: OpArgs) -> Work | None:
    """(input, p, train): nothing happens in eval mode or with p == 0."""
    if not op.flag(2, True) or op.value(1) == 0:
        return None
    return native_dropout(op)


@register("native_dropout", "dropout")
def native_dropout(op: OpArgs) -> Work | None:
    """(input, p, train) -> output, mask: one multiply by 1/(1-p) per element, a bool mask written."""
    x = op.tensor(0)
    if x is None:
        return None
    return Work(float(x.numel), total(x.nbytes, x.nbytes, size_of(x.numel, "bool")), "native_dropout 1*N")


@register("native_dropout_backward", "dropout")
def native_dropout_backward(op: OpArgs) -> Work | None:
    """(grad_output, mask, scale)."""
    go, mask = op.tensor(0), op.tensor(1)
    if go is None or mask is None:
        return None
    return Work(float(go.numel), total(go.nbytes, mask.nbytes, go.nbytes), "native_dropout_backward 1*N")


# -- optimizers ---------------------------------------------------------------------


def _nonzero(op: OpArgs, i: int) -> bool:
    v = op.value(i)
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v != 0


def _list_numel(op: OpArgs, i: int) -> int | None:
    parts = op.tensor_list(i)
    return None if parts is None else sum(t.numel for t in parts)


@register(["_fused_adam_", "_fused_adam", "_fused_adamw_", "_fused_adamw"], "optimizer")
def fused_adam(op: OpArgs) -> Work | None:
    """(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
    weight_decay, eps, amsgrad, maximize, ...)."""
    n = _list_numel(op, 0)
    if n is None:
        return None
    decay = _nonzero(op, 9)
    per = 13 + ((1 if "adamw" in op.name else 2) if decay else 0)
    return Work(float(per * n), None, f"{_base(op.name)} {per}*params")


@register(["_fused_sgd_", "_fused_sgd"], "optimizer")
def fused_sgd(op: OpArgs) -> Work | None:
    """(params, grads, momentum_buffer_list, weight_decay, momentum, lr, ...)."""
    n = _list_numel(op, 0)
    if n is None:
        return None
    per = 2 + (2 if _nonzero(op, 4) else 0) + (2 if _nonzero(op, 3) else 0)
    return Work(float(per * n), None, f"{_base(op.name)} {per}*params")


def foreach(op: OpArgs) -> Work | None:
    """``_foreach_<op>``: the elementwise or reduction op applied to each list element."""
    n = _list_numel(op, 0)
    if n is None:
        return None
    base = _base(op.name).removeprefix("_foreach_")
    per = _PER_REDUCED.get(base, PER_ELEMENT.get(base, 1))
    if base in ("copy", "zero"):
        per = 0
    return Work(float(per * n), None, f"_foreach_{base} {per}*elements")


_FOREACH = ["add", "sub", "mul", "div", "addcmul", "addcdiv", "lerp", "sqrt", "exp", "log", "abs", "neg", "reciprocal", "sigmoid", "maximum", "minimum", "clamp_min", "clamp_max", "pow", "sign", "zero", "copy", "norm", "max"]
for _name in _FOREACH:
    register([f"_foreach_{_name}", f"_foreach_{_name}_"], "optimizer")(foreach)

