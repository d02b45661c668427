"""Forward, backward and optimizer: classify ops, link backward to forward.

A backward op is one run by the autograd engine: a node such as
``MmBackward0`` or ``torch::autograd::AccumulateGrad``, or its
``autograd::engine::evaluate_function:`` wrapper, and every op nested inside
it.  Its forward op is the op that recorded the same
autograd sequence number on the forward pass; Kineto's ``fwdbwd`` flows give
the pair directly where present.

Recompute is forward work inside backward: activation checkpointing
(``torch.utils.checkpoint``) runs a module's forward again while the
autograd engine runs a node.  Such ops sit under a backward node but carry a
module frame of their own, which no other backward op has (backward ops
take their module from their forward op); they are ``recompute``, under the
full path of the module they recompute (:func:`full_module_path`).

Forward is PyTorch's notion: ranges of a program that is not PyTorch (an
MPI or CUDA C++ program under Nsight Systems) are ``other``, never fprop.
"""

from __future__ import annotations

import re

import polars as pl

from kinetolens.model.vocabulary import STEP_PREFIX

#: Separator of a module path's segments.
SEP = "."

FPROP = "fprop"
BPROP = "bprop"
OPTIMIZER = "optimizer"
OTHER = "other"
RECOMPUTE = "recompute"

# Autograd nodes: ``XBackward0`` nodes, the engine's per-node wrapper, and
# the engine's own node classes (``torch::autograd::AccumulateGrad``,
# ``CppNode<...>``, ``CopySlices``), which 2020 traces record bare, with no
# wrapper around them.
_BACKWARD_NODE = re.compile(r"(^autograd::engine::evaluate_function: )|(Backward\d*$)|(^torch::autograd::)")
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#", "Optimizer.")
OTHER_PREFIXES = (STEP_PREFIX, "enumerate(DataLoader)", "DataLoader")
#: NCCL's own NVTX ranges (``ncclGroupEnd``, ``ncclAllReduce``): the library's launch
#: wrappers, not a forward op, whichever pass called them.
NCCL_API_RANGE = r"^nccl[A-Z]"
#: Op names only PyTorch records (its dispatcher, autograd engine, profiler
#: steps, DataLoader and optimizers), in Kineto traces and in the NVTX ranges
#: of ``torch.autograd.profiler.emit_nvtx`` alike.
PYTORCH_PREFIXES = ("aten::", "autograd::", "torch::autograd::", STEP_PREFIX, "enumerate(DataLoader)", "Optimizer.")


def pytorch_names(name: pl.Series) -> bool:
    """Whether any of these op names is one only PyTorch records."""
    text = name.cast(pl.String)
    return bool(pl.select(pl.any_horizontal([text.str.starts_with(p) for p in PYTORCH_PREFIXES]).any()).item())


def own_direction(name: pl.Expr, kind: pl.Expr, pytorch: bool = True) -> pl.Expr:
    """Direction an op has by itself, before inheriting from its parents.

    An expression over whole columns: this runs on every op of the trace.
    ``pytorch`` false (no PyTorch op in the trace): every op is ``other``.
    """
    if not pytorch:
        return pl.repeat(pl.lit(OTHER), pl.len())
    other = pl.any_horizontal([name.str.starts_with(p) for p in OTHER_PREFIXES])
    return (
        pl.when(name.str.contains(_BACKWARD_NODE.pattern))
        .then(pl.lit(BPROP))
        .when(pl.any_horizontal([name.str.starts_with(p) for p in OPTIMIZER_PREFIXES]))
        .then(pl.lit(OPTIMIZER))
        .when(((kind == "annotation") & other) | name.str.contains(NCCL_API_RANGE))
        .then(pl.lit(OTHER))
        .otherwise(pl.lit(FPROP))
    )


def full_module_path(recomputed: str, forward_paths: list[str], near: str | None) -> str:
    """The forward module path a recomputed module path names.

    A recompute's Python stack starts at the checkpointed module
    (``Block_0.Linear_0``), not at the model (``Net_0.Block_0.Linear_0``):
    the forward path that ends with it, the one sharing most of ``near``
    (the path of the backward node running it) where several do; the path
    as recorded where none does.
    """
    tail = SEP + recomputed
    found = [p for p in forward_paths if p == recomputed or p.endswith(tail)]
    if not found:
        return recomputed

    def shared(p: str) -> int:
        a, b = p.split(SEP), (near or "").split(SEP)
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    return max(sorted(found), key=shared)
