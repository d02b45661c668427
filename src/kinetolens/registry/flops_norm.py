"""Normalizations, softmax and losses: a fixed count of FLOPs per element.

Per element of the input (``N``):

* layer/group/batch norm (training) forward: 5 (mean: add; variance: sub,
  square, add; normalize: mul by rstd), +1 with a weight, +1 with a bias.
  Batch norm in eval uses running stats: 2 (sub, mul) +1 weight +1 bias.
  Backward: 8 for the input gradient, +2 for the weight's, +1 for the bias's.
* rms norm forward: 3 (square, add, mul by rstd) +1 with a weight;
  backward: 6 (input) +2 (weight).
* softmax / log_softmax forward: 5 (max, sub, exp, sum, div or sub);
  backward: 4.
* nll_loss: 1 per target element (gather, sum); its backward 1 per target.

Per-row statistics (mean, rstd) are written in fp32 for half inputs and
counted in the bytes.  The counts are conventions (no library agrees on
them); they matter only for ranking such ops, which are memory-bound.
"""

from __future__ import annotations

import math

from kinetolens.registry.dtypes import SCALAR_TYPE_CODES
from kinetolens.registry.flops_base import (
    OpArgs,
    Tensor,
    Work,
    register,
    size_of,
    total,
)


def _acc(dtype: str | None) -> str | None:
    """Statistics dtype: fp32 for reduced-precision inputs."""
    return "fp32" if dtype in ("fp16", "bf16", "fp8") else dtype


def _nbytes(t: Tensor | None) -> float | None:
    return t.nbytes if t is not None else 0


def _norm_forward(
    op: OpArgs, x: Tensor | None, w: Tensor | None, b: Tensor | None, rows: int | None, per: int, label: str
) -> Work | None:
    if x is None or rows is None:
        return None
    n = x.numel
    per_elem = per + (1 if w is not None else 0) + (1 if b is not None else 0)
    stats = size_of(2 * rows, _acc(x.dtype)) if rows else 0
    moved = total(x.nbytes, _nbytes(w), _nbytes(b), x.nbytes, stats)
    return Work(float(per_elem * n), moved, f"{label} {per_elem}*N")


def _mask(op: OpArgs, i: int, n: int = 3) -> list[bool]:
    v = op.value(i)
    if isinstance(v, list) and len(v) == n:
        return [bool(x) for x in v]
    return [True] * n


def _norm_backward(
    go: Tensor | None, x: Tensor | None, w: Tensor | None, rows: int, mask: list[bool], per_input: int,
    per_weight: int, has_bias: bool, label: str, stats_per_row: int = 2,
) -> Work | None:
    if go is None or x is None:
        return None
    n = x.numel
    per = per_input * mask[0] + (per_weight * mask[1] if w is not None else 0)
    per += 1 if (has_bias and len(mask) > 2 and mask[2]) else 0
    stats = size_of(stats_per_row * rows, _acc(x.dtype))
    written = total(x.nbytes if mask[0] else 0, _nbytes(w) if mask[1] else 0,
                    _nbytes(w) if has_bias and len(mask) > 2 and mask[2] else 0)
    moved = total(go.nbytes, x.nbytes, _nbytes(w), stats, written)
    return Work(float(per * n), moved, f"{label} {per}*N")


# -- layer norm -------------------------------------------------------------------


def _rows(x: Tensor | None, normalized: list[int] | None) -> int | None:
    if x is None:
        return None
    k = len(normalized) if normalized else 1
    return math.prod(x.shape[: len(x.shape) - k]) if len(x.shape) >= k else None


@register("layer_norm", "norm", composite=True)
def layer_norm(op: OpArgs) -> Work | None:
    """(input, normalized_shape, weight, bias, eps, cudnn_enable)."""
    x = op.tensor(0)
    return _norm_forward(op, x, op.tensor(2), op.tensor(3), _rows(x, op.int_list(1)), 5, "layer_norm")


@register("native_layer_norm", "norm")
def native_layer_norm(op: OpArgs) -> Work | None:
    """(input, normalized_shape, weight, bias, eps) -> out, mean, rstd."""
    x = op.tensor(0)
    return _norm_forward(op, x, op.tensor(2), op.tensor(3), _rows(x, op.int_list(1)), 5, "native_layer_norm")


@register("native_layer_norm_backward", "norm")
def native_layer_norm_backward(op: OpArgs) -> Work | None:
    """(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)."""
    x = op.tensor(1)
    rows = _rows(x, op.int_list(2))
    if rows is None:
        return None
    has_bias = op.tensor(6) is not None
    return _norm_backward(op.tensor(0), x, op.tensor(5), rows, _mask(op, 7), 8, 2, has_bias,
                          "native_layer_norm_backward")


# -- rms norm ---------------------------------------------------------------------


@register("rms_norm", "norm", composite=True)
def rms_norm(op: OpArgs) -> Work | None:
    """(input, normalized_shape, weight, eps)."""
    x = op.tensor(0)
    rows = _rows(x, op.int_list(1))
    work = _norm_forward(op, x, op.tensor(2), None, rows, 3, "rms_norm")
    if work is None or rows is None or x is None:
        return work
    # one statistic (rstd) per row, not two
    one_stat = size_of(rows, _acc(x.dtype)) or 0
    return Work(work.flops, None if work.bytes is None else work.bytes - one_stat, work.formula)


@register("_fused_rms_norm", "norm")
def fused_rms_norm(op: OpArgs) -> Work | None:
    return rms_norm(op)


@register("_fused_rms_norm_backward", "norm")
def fused_rms_norm_backward(op: OpArgs) -> Work | None:
    """(grad_out, input, normalized_shape, rstd, weight, output_mask)."""
    x = op.tensor(1)
    rows = _rows(x, op.int_list(2))
    if rows is None:
        return None
    mask = _mask(op, 5, 2)
    return _norm_backward(op.tensor(0), x, op.tensor(4), rows, mask, 6, 2, False,
                          "_fused_rms_norm_backward", stats_per_row=1)


# -- batch norm ---------------------------------------------------------------------


def _channels_rows(x: Tensor | None) -> int | None:
    return x.shape[1] if x is not None and len(x.shape) >= 2 else None


def _batch_norm(op: OpArgs, training: bool, label: str) -> Work | None:
    """(input, weight, bias, running_mean, running_var, ...)."""
    x = op.tensor(0)
    c = _channels_rows(x)
    if x is None or c is None:
        return None
    w, b = op.tensor(1), op.tensor(2)
    if training:
        return _norm_forward(op, x, w, b, c, 5, label)
    work = _norm_forward(op, x, w, b, 0, 2, label)
    if work is None or work.bytes is None:
        return work
    running = size_of(2 * c, _acc(x.dtype)) or 0
    return Work(work.flops, work.bytes + running, work.formula)


@register("batch_norm", "norm", composite=True)
def batch_norm(op: OpArgs) -> Work | None:
    """(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled)."""
    return _batch_norm(op, op.flag(5, True), "batch_norm")


@register("_batch_norm_impl_index", "norm", composite=True)
def batch_norm_impl_index(op: OpArgs) -> Work | None:
    return _batch_norm(op, op.flag(5, True), "_batch_norm_impl_index")


@register(["native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm", "_native_batch_norm_legit"], "norm")
def native_batch_norm(op: OpArgs) -> Work | None:
    """(input, weight, bias, running_mean, running_var, training, momentum, eps)."""
    return _batch_norm(op, op.flag(5, True), op.name.split("::")[-1])


@register("_batch_norm_with_update", "norm")
def batch_norm_with_update(op: OpArgs) -> Work | None:
    return _batch_norm(op, True, "_batch_norm_with_update")


@register(["_native_batch_norm_legit_no_training", "_batch_norm_no_update"], "norm")
def batch_norm_no_update(op: OpArgs) -> Work | None:
    return _batch_norm(op, False, op.name.split("::")[-1])


@register(["native_batch_norm_backward", "batch_norm_backward"], "norm")
def native_batch_norm_backward(op: OpArgs) -> Work | None:
    """(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask)."""
    x = op.tensor(1)
    c = _channels_rows(x)
    if c is None:
        return None
    return _norm_backward(op.tensor(0), x, op.tensor(2), c, _mask(op, 9), 8, 2, True, op.name.split("::")[-1])


@register(["cudnn_batch_norm_backward", "miopen_batch_norm_backward"], "norm")
def cudnn_batch_norm_backward(op: OpArgs) -> Work | None:
    """(input, grad_output, weight, running_mean, running_var, save_mean, save_var, epsilon, ...)."""
    x = op.tensor(0)
    c = _channels_rows(x)
    if c is None:
        return None
    return _norm_backward(op.tensor(1), x, op.tensor(2), c, [True, True, True], 8, 2, True,
                          op.name.split("::")[-1])


# -- group norm ----------------------------------------------------------------------


@register("group_norm", "norm", composite=True)
def group_norm(op: OpArgs) -> Work | None:
    """(input, num_groups, weight, bias, eps, cudnn_enabled)."""
    x, groups = op.tensor(0), op.value(1)
    if x is None or not isinstance(groups, int) or groups <= 0 or not x.shape:
        return None
    return _norm_forward(op, x, op.tensor(2), op.tensor(3), x.shape[0] * groups, 5, "group_norm")


@register("native_group_norm", "norm")
def native_group_norm(op: OpArgs) -> Work | None:
    """(input, weight, bias, N, C, HxW, group, eps)."""
    x, n, groups = op.tensor(0), op.value(3), op.value(6)
    if x is None or not isinstance(n, int) or not isinstance(groups, int) or n <= 0 or groups <= 0:
        return None
    return _norm_forward(op, x, op.tensor(1), op.tensor(2), n * groups, 5, "native_group_norm")


@register("aiter::_groupnorm_run", "norm")
def aiter_group_norm(op: OpArgs) -> Work | None:
    """AMD aiter's group norm: (input[N, C, ...], num_groups, weight, bias, eps)."""
    x, groups = op.tensor(0), op.value(1)
    if x is None or len(x.shape) < 2 or not isinstance(groups, int) or isinstance(groups, bool) or groups <= 0:
        return None
    if x.shape[1] % groups:
        return None
    return _norm_forward(op, x, op.tensor(2), op.tensor(3), x.shape[0] * groups, 5, "groupnorm")


@register("native_group_norm_backward", "norm")
def native_group_norm_backward(op: OpArgs) -> Work | None:
    """(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)."""
    n, groups = op.value(5), op.value(8)
    if not isinstance(n, int) or not isinstance(groups, int) or n <= 0 or groups <= 0:
        return None
    return _norm_backward(op.tensor(0), op.tensor(1), op.tensor(4), n * groups, _mask(op, 9), 8, 2, True,
                          "native_group_norm_backward")


# -- softmax ---------------------------------------------------------------------


def _softmax(op: OpArgs, per: int, out_dtype: str | None, label: str) -> Work | None:
    x = op.tensor(0)
    if x is None:
        return None
    moved = total(x.nbytes, size_of(x.numel, out_dtype or x.dtype))
    return Work(float(per * x.numel), moved, f"{label} {per}*N")


@register(["softmax", "log_softmax", "special_softmax", "special_log_softmax"], "softmax", composite=True)
def softmax(op: OpArgs) -> Work | None:
    """(self, dim, dtype)."""
    code = op.value(2)
    return _softmax(op, 5, SCALAR_TYPE_CODES.get(code) if isinstance(code, int) else None, op.name.split("::")[-1])


@register(["_softmax", "_log_softmax"], "softmax")
def softmax_impl(op: OpArgs) -> Work | None:
    """(self, dim, half_to_float)."""
    return _softmax(op, 5, "fp32" if op.flag(2) else None, op.name.split("::")[-1])


@register(["_softmax_backward_data", "_log_softmax_backward_data"], "softmax")
def softmax_backward(op: OpArgs) -> Work | None:
    """(grad_output, output, dim, input_dtype)."""
    go, out = op.tensor(0), op.tensor(1)
    if go is None or out is None:
        return None
    code = op.value(3)
    in_dtype = SCALAR_TYPE_CODES.get(code) if isinstance(code, int) else go.dtype
    moved = total(go.nbytes, out.nbytes, size_of(go.numel, in_dtype))
    return Work(4.0 * go.numel, moved, f"{op.name.split('::')[-1]} 4*N")


# -- losses --------------------------------------------------------------------------


@register(["cross_entropy_loss"], "loss", composite=True)
def cross_entropy(op: OpArgs) -> Work | None:
    """(self, target, weight, reduction, ignore_index, label_smoothing): log_softmax + nll_loss."""
    x, target = op.tensor(0), op.tensor(1)
    if x is None or target is None:
        return None
    n = x.numel
    moved = total(x.nbytes, target.nbytes, size_of(target.numel, x.dtype))
    return Work(5.0 * n + target.numel, moved, "cross_entropy 5*N + targets")


@register(["nll_loss", "nll_loss_nd", "nll_loss2d"], "loss", composite=True)
def nll_loss(op: OpArgs) -> Work | None:
    return nll_loss_forward(op)


@register(["nll_loss_forward", "nll_loss2d_forward"], "loss")
def nll_loss_forward(op: OpArgs) -> Work | None:
    """(self, target, weight, reduction, ignore_index) -> output, total_weight."""
    x, target = op.tensor(0), op.tensor(1)
    if x is None or target is None:
        return None
    reduction = op.value(3)
    out = x.itemsize if reduction in (1, 2) else size_of(target.numel, x.dtype)
    moved = total(x.nbytes, target.nbytes, _nbytes(op.tensor(2)), out)
    return Work(float(target.numel), moved, f"{op.name.split('::')[-1]} 1*targets")


@register(["nll_loss_backward", "nll_loss2d_backward"], "loss")
def nll_loss_backward(op: OpArgs) -> Work | None:
    """(grad_output, self, target, weight, reduction, ignore_index, total_weight) -> grad_input."""
    go, x, target = op.tensor(0), op.tensor(1), op.tensor(2)
    if go is None or x is None or target is None:
        return None
    moved = total(go.nbytes, target.nbytes, _nbytes(op.tensor(3)), x.nbytes)
    return Work(float(target.numel), moved, f"{op.name.split('::')[-1]} 1*targets")
