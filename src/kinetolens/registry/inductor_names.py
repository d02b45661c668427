"""The ATen ops a ``torch.compile`` kernel's name says it fuses.

Inductor names each kernel it generates after the ops fused into it, in
alphabetical order, joined by ``_`` (``descriptive_names="original_aten"``,
its default): ``triton_poi_fused__unsafe_view_mul_silu_2`` fuses
``aten::_unsafe_view``, ``aten::mul`` and ``aten::silu``; a C++ kernel is
``cpp_fused_add_mul_native_layer_norm_relu_0``, and
``graph_0_cpp_fused_...`` in the profiler when inductor wraps it in a range
(``TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE``).  Op names contain ``_``
themselves, so the name is split by the longest known op name at each
point (the FLOP registry's ops and :data:`KNOWN_OPS`); a word that starts
no known name is taken as an op of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

#: ``[graph_N_]cpp_fused_OPS_N`` and ``triton_KIND_fused_OPS_N`` (KIND: poi
#: pointwise, red reduction, per persistent reduction, tem template ...).
_NAME = re.compile(r"^(?:graph_(?P<graph>\d+)_)?(?P<kernel>(?:cpp|triton_(?P<kind>[a-z]+))_fused_(?P<ops>\w+?)_\d+)$")

#: ATen ops with ``_`` in their names that inductor kernels name, beyond
#: those the FLOP registry knows.
KNOWN_OPS = frozenset(
    """
    _unsafe_view _to_copy _softmax _softmax_backward_data _log_softmax _log_softmax_backward_data
    native_layer_norm native_layer_norm_backward native_batch_norm native_batch_norm_backward
    _native_batch_norm_legit _native_batch_norm_legit_functional _native_batch_norm_legit_no_training
    native_group_norm native_group_norm_backward native_dropout native_dropout_backward
    threshold_backward gelu_backward silu_backward sigmoid_backward tanh_backward hardtanh_backward
    leaky_relu_backward convolution_backward embedding_dense_backward nll_loss_forward nll_loss_backward
    index_put index_add index_select scatter_add scatter_reduce select_scatter slice_scatter
    as_strided_scatter constant_pad_nd reflection_pad2d upsample_nearest2d upsample_bilinear2d
    max_pool2d_with_indices max_pool2d_with_indices_backward avg_pool2d avg_pool2d_backward
    _adaptive_avg_pool2d _adaptive_avg_pool2d_backward _low_memory_max_pool2d_with_indices
    var_mean clamp_min clamp_max new_zeros new_ones new_empty full_like zeros_like ones_like
    empty_like rand_like randn_like masked_fill bitwise_and bitwise_or bitwise_not logical_and
    logical_or logical_not split_with_sizes _scaled_dot_product_flash_attention
    _scaled_dot_product_efficient_attention _scaled_mm _foreach_add _foreach_mul
    """.split()
)


@dataclass(frozen=True)
class GeneratedName:
    """What a generated kernel's name says: its backend, kind and fused ops."""

    kernel: str  # the name inductor gave it (no ``graph_N_`` profiler prefix)
    backend: str  # "cpp" or "triton"
    kind: str | None  # Triton's poi / red / per / tem ...; None for C++
    graph: int | None  # the ``graph_N_`` prefix, where the profiler wrote one
    ops: tuple[str, ...]  # ``aten::...``, in the name's order


@lru_cache(maxsize=1)
def _vocabulary() -> frozenset[str]:
    from kinetolens.registry.flops import REGISTRY

    registered = {name.split("::", 1)[1] for name in REGISTRY if name.startswith("aten::")}
    return frozenset({*registered, *KNOWN_OPS})


def split_ops(text: str) -> tuple[str, ...]:
    """``_unsafe_view_mul_silu`` -> ``(_unsafe_view, mul, silu)`` (see the module docstring)."""
    words = text.split("_")
    known = _vocabulary()
    out: list[str] = []
    i = 0
    while i < len(words):
        lead = ""
        start = i
        while start < len(words) and words[start] == "":  # a name that starts with "_"
            lead += "_"
            start += 1
        if start >= len(words):
            break
        best = start + 1
        for end in range(min(len(words), start + 8), start + 1, -1):
            if lead + "_".join(words[start:end]) in known:
                best = end
                break
        out.append(lead + "_".join(words[start:best]))
        i = best
    return tuple(out)


@lru_cache(maxsize=4096)
def parse(name: str) -> GeneratedName | None:
    """The parts of a generated kernel's name; None for any other name."""
    m = _NAME.match(name)
    if m is None:
        return None
    ops = tuple(f"aten::{op}" for op in split_ops(m["ops"]))
    backend = "cpp" if m["kernel"].startswith("cpp_") else "triton"
    graph = int(m["graph"]) if m["graph"] is not None else None
    return GeneratedName(m["kernel"], backend, m["kind"], graph, ops)
