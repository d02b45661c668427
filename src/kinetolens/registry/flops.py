"""The FLOP and byte formula registry, keyed by op name.

One entry per op (``aten::mm``, ``aten::convolution_backward`` ...): a small
function of the call's input shapes, dtypes and concrete arguments that
returns :class:`Work` (algorithmic FLOPs, minimum bytes moved, and a short
formula text).  Families live in their own modules; importing this module
registers them all.  Adding an op is one ``@register`` entry.

>>> compute("aten::mm", "[[64, 32], [32, 16]]", '["float", "float"]', '["", ""]').flops
65536.0
"""

from __future__ import annotations

from kinetolens.registry import (  # noqa: F401  (importing registers the families)
    flops_attention,
    flops_conv,
    flops_elementwise,
    flops_gemm,
    flops_norm,
)
from kinetolens.registry.flops_base import REGISTRY, Entry, OpArgs, Work

__all__ = ["REGISTRY", "Entry", "OpArgs", "Work", "compute", "evaluate", "lookup"]


def lookup(name: str) -> Entry | None:
    return REGISTRY.get(name)


def evaluate(op: OpArgs) -> Work | None:
    """The op's work, or None when it has no formula or its arguments do not fit one.

    A formula meeting arguments it does not expect (a missing shape, an
    unusual overload) gives no number rather than a wrong one or an error.
    """
    entry = REGISTRY.get(op.name)
    if entry is None:
        return None
    try:
        return entry.fn(op)
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError):
        return None


def compute(
    name: str, dims: str | None, types: str | None, concrete: str | None = None, fwd: OpArgs | None = None
) -> Work | None:
    """Work of one call from the ``ops`` table's JSON text columns."""
    return evaluate(OpArgs.parse(name, dims, types, concrete, fwd))
