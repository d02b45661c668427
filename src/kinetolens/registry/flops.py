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

import math

from kinetolens.registry import (  # noqa: F401  (importing registers the families)
    flops_attention,
    flops_conv,
    flops_elementwise,
    flops_engines,
    flops_gemm,
    flops_moe,
    flops_norm,
    flops_paged_attention,
)
from kinetolens.registry.flops_base import REGISTRY, Entry, OpArgs, Work

__all__ = ["REGISTRY", "Entry", "FormulaError", "OpArgs", "Work", "compute", "evaluate", "lookup"]


class FormulaError(Exception):
    """A formula failed on an op call for a reason other than its arguments:
    a bug in the formula, to be counted and reported, never a silent "no FLOPs"."""

    def __init__(self, op_name: str, reason: str) -> None:
        self.op_name = op_name
        self.reason = reason
        super().__init__(f"FLOP formula for {op_name} failed: {reason}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.op_name, self.reason), self.__dict__)  # not from the message


def lookup(name: str) -> Entry | None:
    return REGISTRY.get(name)


def _valid(work: Work) -> bool:
    """FLOPs finite and not negative, bytes too where known."""
    flops_ok = isinstance(work.flops, (int, float)) and math.isfinite(work.flops) and work.flops >= 0
    bytes_ok = work.bytes is None or (isinstance(work.bytes, (int, float)) and math.isfinite(work.bytes) and work.bytes >= 0)
    return flops_ok and bytes_ok


def evaluate(op: OpArgs) -> Work | None:
    """The op's work, or None when it has no formula or its arguments do not fit one.

    Arguments a formula does not expect (a missing or inconsistent shape, an
    unusual overload) make it return None: no number rather than a wrong one.
    Anything else a formula raises, or an impossible result (negative or
    non-finite), is a :class:`FormulaError` naming the op: a coding bug must
    not quietly remove ops from FLOPs, roofline and recommendations.
    """
    entry = REGISTRY.get(op.name)
    if entry is None:
        return None
    try:
        work = entry.fn(op)
    except Exception as exc:  # noqa: BLE001 - every failure is reported, by the caller, with the op's name
        raise FormulaError(op.name, f"{type(exc).__name__}: {exc}") from exc
    if work is not None and not _valid(work):
        raise FormulaError(op.name, f"impossible result {work.flops!r} FLOPs, {work.bytes!r} bytes")
    return work


def compute(
    name: str, dims: str | None, types: str | None, concrete: str | None = None, fwd: OpArgs | None = None
) -> Work | None:
    """Work of one call from the ``ops`` table's JSON text columns."""
    return evaluate(OpArgs.parse(name, dims, types, concrete, fwd))
