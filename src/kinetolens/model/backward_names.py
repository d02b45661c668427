"""Which forward ops a backward node's name admits.

A backward node is named after the ATen function whose derivative it
computes (``derivatives.yaml``): ``MmBackward0`` comes from ``aten::mm``,
``NativeLayerNormBackward0`` from ``aten::native_layer_norm``.  Normalized
with :func:`~kinetolens.model.autograd_order.node_key` and
:func:`~kinetolens.model.autograd_order.op_key` the two names are equal,
except where a composite op that the profiler may report as the creator
calls the differentiable one under another name (``aten::linear`` around
``aten::addmm``, ``aten::to`` around ``aten::_to_copy``): :data:`ALSO_FROM`
lists those.

A sequence number that names an op of another family
(``NativeLayerNormBackward0`` -> ``aten::addmm``) is a collision (the
creator's event was dropped or numbers repeat), not a link.  Names that are
not ATen's (custom ``autograd.Function`` ranges, ``CppNode<...>``,
TorchScript graphs, ``record_function`` ops) cannot be judged and always fit.
"""

from __future__ import annotations

from kinetolens.model.autograd_order import node_key, op_key

_CONVOLUTIONS = frozenset({
    "convolution", "conv1d", "conv2d", "conv3d", "convtranspose1d", "convtranspose2d", "convtranspose3d",
    "convolutionmode", "cudnnconvolution", "cudnnconvolutiontranspose", "miopenconvolution",
    "miopenconvolutiontranspose", "miopendepthwiseconvolution", "mkldnnconvolution", "slowconv2d",
    "slowconv3d", "thnnconv2d", "slowconvdilated2d", "slowconvdilated3d", "slowconvtranspose2d",
    "slowconvtranspose3d", "convdepthwise2d", "nnpackspatialconvolution",
})
_BATCH_NORMS = frozenset({
    "batchnorm", "batchnormimplindex", "nativebatchnorm", "nativebatchnormlegit", "cudnnbatchnorm",
    "miopenbatchnorm", "instancenorm",
})
_ATTENTION = frozenset({
    "scaleddotproductattention", "scaleddotproductefficientattention", "scaleddotproductflashattention",
    "scaleddotproductflashattentionforcpu", "scaleddotproductcudnnattention", "efficientattention",
    "flashattention",
})
_CASTS = frozenset({"to", "type", "typeas", "float", "half", "double", "bfloat16", "int", "long", "bool", "cuda", "cpu"})
_VIEWS = frozenset({"view", "viewas", "reshape", "reshapeas", "flatten", "unflatten"})

#: Backward node key -> forward op keys that may record its sequence number
#: besides the node's own name (composites that call it, aliases).
ALSO_FROM: dict[str, frozenset[str]] = {
    "addmm": frozenset({"linear", "matmul"}),
    "mm": frozenset({"matmul", "linear", "einsum", "tensordot", "chainmatmul"}),
    "bmm": frozenset({"matmul", "einsum", "tensordot"}),
    "mv": frozenset({"matmul", "linear"}),
    "addmv": frozenset({"linear"}),
    "dot": frozenset({"matmul", "vdot", "inner"}),
    **{conv: _CONVOLUTIONS for conv in _CONVOLUTIONS},
    **{norm: _BATCH_NORMS for norm in _BATCH_NORMS},
    "nativelayernorm": frozenset({"layernorm"}),
    "nativegroupnorm": frozenset({"groupnorm"}),
    "fusedrmsnorm": frozenset({"rmsnorm"}),
    **{attention: _ATTENTION for attention in _ATTENTION},
    "tocopy": _CASTS,
    "view": _VIEWS,
    "reshapealias": _VIEWS,
    "unsafeview": _VIEWS | {"matmul", "linear", "einsum", "tensordot"},
    "clone": frozenset({"contiguous", "reshape", "flatten", "clonepreservestrides"}),
    "expand": frozenset({"expandas", "broadcastto", "broadcasttensors"}),
    "transpose": frozenset({"swapaxes", "swapdims"}),
    "permute": frozenset({"movedim", "moveaxis"}),
    "slice": frozenset({"narrow", "sliceinverse"}),
    "split": frozenset({"chunk", "tensorsplit", "splitwithsizes"}),
    "splitwithsizes": frozenset({"split", "tensorsplit", "chunk"}),
    "cat": frozenset({"concat", "concatenate", "hstack", "vstack", "dstack"}),
    "repeat": frozenset({"tile"}),
    "pow": frozenset({"square"}),
    "mul": frozenset({"multiply"}),
    "div": frozenset({"divide", "truedivide"}),
    "sub": frozenset({"subtract"}),
    "clamp": frozenset({"clip"}),
    "clampmin": frozenset({"clamp", "clip"}),
    "clampmax": frozenset({"clamp", "clip"}),
    "mean": frozenset({"adaptiveavgpool1d", "adaptiveavgpool2d", "adaptiveavgpool3d"}),
    "hardtanh": frozenset({"relu6"}),
    "elu": frozenset({"selu", "celu"}),
    "prelukernel": frozenset({"prelu"}),
    "nllloss": frozenset({"crossentropyloss", "nlllossnd"}),
    "nllloss2d": frozenset({"crossentropyloss", "nllloss", "nlllossnd"}),
    "maxpool2dwithindices": frozenset({"maxpool2d"}),
    "maxpool3dwithindices": frozenset({"maxpool3d"}),
    "nativedropout": frozenset({"dropout", "featuredropout", "alphadropout"}),
    "fuseddropout": frozenset({"dropout", "featuredropout"}),
    "linalgvectornorm": frozenset({"norm", "linalgnorm", "frobeniusnorm"}),
    "norm": frozenset({"linalgvectornorm", "linalgnorm", "frobeniusnorm"}),
    "im2col": frozenset({"unfold"}),
}


def fits(grad_fn: str | None, fwd_op: str | None) -> bool:
    """Whether backward node ``grad_fn`` (or its engine wrapper) can differentiate op ``fwd_op``."""
    node, op = node_key(grad_fn or ""), op_key(fwd_op or "")
    if node is None or op is None:
        return True
    return node == op or op in ALSO_FROM.get(node, frozenset())
