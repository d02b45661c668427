"""Convolutions, forward and backward: 2 FLOPs per multiply-add.

Forward: ``2 * N * prod(out_spatial) * C_out * (C_in / groups) * prod(kernel)``
(``prod(weight.shape)`` already holds ``C_out * C_in / groups * kernel``).
A transposed convolution is the data gradient of a regular one, so it does
``2 * N * prod(in_spatial) * prod(weight.shape)``.  Bias adds are not counted
(bytes are), as for GEMMs.

Forward calls recorded without their stride and padding (older Kineto
traces record shapes but not non-tensor arguments) take the output size
from the backward pass: the incoming gradient of the autograd node linked
to the call has the output's shape (``OpArgs.bwd``).  The formula then says
``output from its gradient``.  A forward-only call without those arguments
gets no count: guessing ``stride=1`` would overcount a strided layer 4x.
Traces that record no dtypes at all still get FLOPs (shapes suffice), with
bytes unknown.

Shapes must fit as the convolution itself requires (input channels =
weight's ``C_in/groups * groups``, the gradient's batch and channels those of
the output) or the call gets no number.

Backward: the data gradient (dgrad) and the weight gradient (wgrad) each do
the forward's FLOPs; ``output_mask`` says which ran.  Grouped convolutions
count ``C_in / groups`` in both, which is what the weight gradient really
sums over (``torch.utils.flop_counter`` uses the full ``C_in`` there).
"""

from __future__ import annotations

import math

from kinetolens.registry.flops_base import (
    OpArgs,
    Tensor,
    Work,
    register,
    size_of,
    total,
)


def out_spatial(
    x: Tensor, w: Tensor, stride: list[int], padding: list[int], dilation: list[int], transposed: bool,
    output_padding: list[int],
) -> tuple[int, ...]:
    kernel = w.shape[2:]
    out = []
    for i, size in enumerate(x.shape[2:]):
        k, s, p, d = kernel[i], stride[i], padding[i], dilation[i]
        if transposed:
            out.append((size - 1) * s - 2 * p + d * (k - 1) + output_padding[i] + 1)
        else:
            out.append((size + 2 * p - d * (k - 1) - 1) // s + 1)
    return tuple(out)


def conv_forward(
    label: str, x: Tensor | None, w: Tensor | None, bias: Tensor | None, stride: list[int] | None,
    padding: list[int] | str | None, dilation: list[int] | None, transposed: bool,
    output_padding: list[int] | None, groups: int | None, bwd: OpArgs | None = None,
) -> Work | None:
    if x is None or w is None or len(x.shape) < 3 or len(w.shape) != len(x.shape):
        return None
    if not _channels_fit(x.shape, w.shape, transposed, groups):
        return None
    nd = len(x.shape) - 2
    stride = stride or [1] * nd
    dilation = dilation or [1] * nd
    output_padding = output_padding or [0] * nd
    if padding == "valid":
        padding = [0] * nd
    derived = ""
    lists = (padding, stride, dilation, output_padding)
    if padding == "same":
        spatial = x.shape[2:]
    elif all(isinstance(v, list) and len(v) == nd for v in lists) and min(stride) > 0 and min(dilation) > 0:
        spatial = out_spatial(x, w, stride, padding, dilation, transposed, output_padding)  # type: ignore[arg-type]
    elif not transposed and (grad := _output_from_gradient(bwd, x, w)) is not None:
        spatial, derived = grad.shape[2:], ", output from its gradient"
    else:
        return None
    if min(spatial) <= 0:
        return None  # padding, stride and kernel that give no output: arguments misread
    n = x.shape[0]
    if transposed:
        if groups is None:
            return None
        c_out = w.shape[1] * groups
        flops = 2.0 * n * math.prod(x.shape[2:]) * math.prod(w.shape)
    else:
        c_out = w.shape[0]
        flops = 2.0 * n * math.prod(spatial) * math.prod(w.shape)
    out = size_of(n * c_out * math.prod(spatial), x.dtype)
    moved = total(x.nbytes, w.nbytes, bias.nbytes if bias else 0, out)
    kind = f"conv_transpose{nd}d" if transposed else f"conv{nd}d"
    expr = "N*in" if transposed else "N*out"
    return Work(flops, moved, f"{label.split('::')[-1]} {kind} 2*{expr}*prod(weight){derived}")


def _channels_fit(x: tuple[int, ...], w: tuple[int, ...], transposed: bool, groups: int | None) -> bool:
    """Input channels agree with the weight (``[C_out, C_in/groups, ...]``,
    transposed ``[C_in, C_out/groups, ...]``), as the convolution itself
    requires; ``groups`` None when not recorded."""
    if transposed:
        return x[1] == w[0] and (groups is None or (groups > 0 and w[0] % groups == 0))
    if groups is not None:
        return groups > 0 and x[1] == w[1] * groups and w[0] % groups == 0
    return w[1] > 0 and x[1] % w[1] == 0


#: Where the output's gradient sits among a linked backward op's inputs;
#: autograd nodes (``CudnnConvolutionBackward``, ``ConvolutionBackward0``) take it first.
_GRAD_OUTPUT_AT = {
    "aten::convolution_backward": 0,
    "aten::cudnn_convolution_backward": 1,
    "aten::cudnn_convolution_backward_input": 1,
    "aten::cudnn_convolution_backward_weight": 1,
}


def _output_from_gradient(bwd: OpArgs | None, x: Tensor, w: Tensor) -> Tensor | None:
    """The forward output's shape, read from the backward op's gradient input
    when it is consistent with the call (same rank and batch, ``C_out`` channels)."""
    if bwd is None:
        return None
    grad = _tensor(bwd, _GRAD_OUTPUT_AT.get(bwd.name, 0))
    if grad is None or len(grad.shape) != len(x.shape) or grad.shape[:2] != (x.shape[0], w.shape[0]):
        return None
    return grad


def _tensor(op: OpArgs, i: int) -> Tensor | None:
    """Argument ``i`` as a tensor; in a trace that recorded no dtypes at all,
    any non-empty integer shape (dtype unknown, so bytes are too)."""
    t = op.tensor(i)
    if t is not None or op.types or i >= len(op.dims):
        return t
    dims = op.dims[i]
    if isinstance(dims, list) and dims and all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        return Tensor(tuple(dims), None)
    return None


def _ints(op: OpArgs, i: int, nd: int) -> list[int] | None:
    return op.int_list(i, nd)


def _groups(op: OpArgs, i: int) -> int | None:
    v = op.value(i)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _nd(op: OpArgs) -> int:
    x = _tensor(op, 0)
    return len(x.shape) - 2 if x and len(x.shape) >= 3 else 0


@register(
    ["convolution", "_convolution", "convolution_overrideable"], "conv", composite=True, defers_to=["conv"],
    needs_backward=True,
)
def convolution(op: OpArgs) -> Work | None:
    """(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)."""
    nd = _nd(op)
    groups = op.value(8)
    return conv_forward(
        op.name, _tensor(op, 0), _tensor(op, 1), _tensor(op, 2), _ints(op, 3, nd), _ints(op, 4, nd), _ints(op, 5, nd),
        op.flag(6), _ints(op, 7, nd), groups if isinstance(groups, int) else None, op.bwd,
    )


@register(["conv1d", "conv2d", "conv3d"], "conv", composite=True, defers_to=["conv"], needs_backward=True)
def conv_nd(op: OpArgs) -> Work | None:
    """(input, weight, bias, stride, padding, dilation, groups); padding may be 'same'/'valid'."""
    nd = _nd(op)
    pad = op.value(4)
    padding = pad if pad in ("same", "valid") else _ints(op, 4, nd)
    return conv_forward(
        op.name, _tensor(op, 0), _tensor(op, 1), _tensor(op, 2), _ints(op, 3, nd), padding, _ints(op, 5, nd),
        False, None, _groups(op, 6),
    )


@register(["conv_transpose1d", "conv_transpose2d", "conv_transpose3d"], "conv", composite=True, defers_to=["conv"])
def conv_transpose_nd(op: OpArgs) -> Work | None:
    """(input, weight, bias, stride, padding, output_padding, groups, dilation)."""
    nd = _nd(op)
    groups = op.value(6)
    return conv_forward(
        op.name, _tensor(op, 0), _tensor(op, 1), _tensor(op, 2), _ints(op, 3, nd), _ints(op, 4, nd), _ints(op, 7, nd),
        True, _ints(op, 5, nd), groups if isinstance(groups, int) else 1,
    )


@register(["cudnn_convolution", "miopen_convolution_no_bias"], "conv", needs_backward=True)
def cudnn_convolution(op: OpArgs) -> Work | None:
    """(self, weight, padding, stride, dilation, groups, ...): no bias argument."""
    nd = _nd(op)
    return conv_forward(
        op.name, _tensor(op, 0), _tensor(op, 1), None, _ints(op, 3, nd), _ints(op, 2, nd), _ints(op, 4, nd),
        False, None, _groups(op, 5), op.bwd,
    )


@register("cudnn_convolution_transpose", "conv")
def cudnn_convolution_transpose(op: OpArgs) -> Work | None:
    """(self, weight, padding, output_padding, stride, dilation, groups, ...)."""
    nd = _nd(op)
    groups = op.value(6)
    return conv_forward(
        op.name, _tensor(op, 0), _tensor(op, 1), None, _ints(op, 4, nd), _ints(op, 2, nd), _ints(op, 5, nd),
        True, _ints(op, 3, nd), groups if isinstance(groups, int) else None,
    )


@register(["mkldnn_convolution", "miopen_convolution", "miopen_depthwise_convolution"], "conv", needs_backward=True)
def mkldnn_convolution(op: OpArgs) -> Work | None:
    """(self, weight, bias, padding, stride, dilation, groups, ...)."""
    nd = _nd(op)
    return conv_forward(
        op.name, _tensor(op, 0), _tensor(op, 1), _tensor(op, 2), _ints(op, 4, nd), _ints(op, 3, nd), _ints(op, 5, nd),
        False, None, _groups(op, 6), op.bwd,
    )


@register(
    ["_slow_conv2d_forward", "slow_conv3d_forward", "thnn_conv2d", "slow_conv3d", "_conv_depthwise2d",
     "slow_conv_dilated2d", "slow_conv_dilated3d"],
    "conv",
)
def slow_convolution(op: OpArgs) -> Work | None:
    """(self, weight, kernel_size, bias, stride, padding[, dilation])."""
    nd = _nd(op)
    return conv_forward(
        op.name, _tensor(op, 0), _tensor(op, 1), _tensor(op, 3), _ints(op, 4, nd), _ints(op, 5, nd), _ints(op, 6, nd),
        False, None, None,
    )


@register(["slow_conv_transpose2d", "slow_conv_transpose3d"], "conv")
def slow_conv_transpose(op: OpArgs) -> Work | None:
    """(self, weight, kernel_size, bias, stride, padding, output_padding, dilation); groups are 1."""
    nd = _nd(op)
    return conv_forward(
        op.name, _tensor(op, 0), _tensor(op, 1), _tensor(op, 3), _ints(op, 4, nd), _ints(op, 5, nd), _ints(op, 7, nd),
        True, _ints(op, 6, nd), 1,
    )


# -- backward -------------------------------------------------------------------


def _pass_flops(grad_out: Tensor, x_shape: tuple[int, ...], w: Tensor, transposed: bool) -> float:
    """FLOPs of one of dgrad / wgrad: the forward's count."""
    spatial = x_shape[2:] if transposed else grad_out.shape[2:]
    return 2.0 * grad_out.shape[0] * math.prod(spatial) * math.prod(w.shape)


@register("convolution_backward", "conv")
def convolution_backward(op: OpArgs) -> Work | None:
    """(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
    groups, output_mask)."""
    go, x, w = _tensor(op, 0), _tensor(op, 1), _tensor(op, 2)
    if go is None or x is None or w is None or len(go.shape) < 3 or not (len(x.shape) == len(w.shape) == len(go.shape)):
        return None
    transposed = op.flag(7)
    if go.shape[0] != x.shape[0] or not _channels_fit(x.shape, w.shape, transposed, _groups(op, 9)):
        return None
    if go.shape[1] != (w.shape[1] * (_groups(op, 9) or 1) if transposed else w.shape[0]):
        return None
    mask = op.value(10)
    if not (isinstance(mask, list) and len(mask) == 3):
        mask = [True, True, op.value(3) is not None]
    one = _pass_flops(go, x.shape, w, transposed)
    flops = one * (int(bool(mask[0])) + int(bool(mask[1])))
    bias_sizes = op.int_list(3)
    c_out = bias_sizes[0] if bias_sizes else (go.shape[1])
    moved = total(
        go.nbytes,
        w.nbytes if mask[0] else 0,
        x.nbytes if mask[1] else 0,
        x.nbytes if mask[0] else 0,  # grad_input written
        w.nbytes if mask[1] else 0,  # grad_weight written
        size_of(c_out, go.dtype) if mask[2] else 0,
    )
    parts = "+".join(p for p, on in (("dgrad", mask[0]), ("wgrad", mask[1])) if on) or "bias only"
    return Work(flops, moved, f"convolution_backward {parts}, each 2*N*out*prod(weight)")


def _forward_tensor(op: OpArgs, i: int) -> Tensor | None:
    fwd = op.fwd
    if fwd is None:
        return None
    return _tensor(fwd, i) if "conv" in fwd.name else None


@register(["cudnn_convolution_backward_input", "miopen_convolution_backward_input"], "conv", needs_forward=True)
def cudnn_backward_input(op: OpArgs) -> Work | None:
    """Older cuDNN API: (self_size, grad_output, weight, padding, stride, dilation, groups, ...) -> dgrad.

    ``self_size`` is often recorded without its value, so the data gradient's
    shape comes from the forward op's input.
    """
    go, w = _tensor(op, 1), _tensor(op, 2)
    size = op.int_list(0)
    x_shape = tuple(size) if size else None
    if x_shape is None:
        x = _forward_tensor(op, 0)
        x_shape = x.shape if x else None
    if go is None or w is None or len(go.shape) < 3 or len(w.shape) != len(go.shape) or go.shape[1] != w.shape[0]:
        return None
    flops = _pass_flops(go, x_shape or go.shape, w, False)
    grad_in = size_of(math.prod(x_shape), go.dtype) if x_shape else None
    return Work(flops, total(go.nbytes, w.nbytes, grad_in), "dgrad 2*N*out*prod(weight)")


@register(["cudnn_convolution_backward_weight", "miopen_convolution_backward_weight"], "conv", needs_forward=True)
def cudnn_backward_weight(op: OpArgs) -> Work | None:
    """Older cuDNN API: (weight_size, grad_output, self, padding, stride, dilation, groups, ...) -> wgrad."""

    go, x = _tensor(op, 1), _tensor(op, 2)
    size = op.int_list(0)
    if go is None or x is None or len(go.shape) < 3 or len(x.shape) != len(go.shape) or x.shape[0] != go.shape[0]:
        return None
    if size:
        w_numel = math.prod(size)
    else:
        w = _forward_tensor(op, 1)  # ``weight_size`` unrecorded: the forward op's weight
        if w is None:
            return None
        w_numel = w.numel
    flops = 2.0 * go.shape[0] * math.prod(go.shape[2:]) * w_numel
    return Work(flops, total(go.nbytes, x.nbytes, size_of(w_numel, go.dtype)), "wgrad 2*N*out*prod(weight)")


@register(["cudnn_convolution_backward", "miopen_convolution_backward"], "conv", composite=True, defers_to=["conv"])
def cudnn_convolution_backward(op: OpArgs) -> Work | None:
    """Older cuDNN API: (self, grad_output, weight, padding, stride, dilation, groups, ..., output_mask)."""
    x, go, w = _tensor(op, 0), _tensor(op, 1), _tensor(op, 2)
    if x is None or go is None or w is None or len(go.shape) < 3 or not (len(x.shape) == len(w.shape) == len(go.shape)):
        return None
    if go.shape[0] != x.shape[0] or go.shape[1] != w.shape[0]:
        return None
    mask = op.value(len(op) - 1)
    if not (isinstance(mask, list) and len(mask) >= 2):
        mask = [True, True]
    one = _pass_flops(go, x.shape, w, False)
    flops = one * (int(bool(mask[0])) + int(bool(mask[1])))
    moved = total(go.nbytes, w.nbytes, x.nbytes, x.nbytes if mask[0] else 0, w.nbytes if mask[1] else 0)
    return Work(flops, moved, "cudnn_convolution_backward dgrad+wgrad")
