"""Backward node -> forward op by execution order, for traces without sequence numbers.

Traces recorded before PyTorch 1.8, and newer ones recorded without shapes,
carry no autograd sequence numbers and no ``fwdbwd`` flows.  The pairing is
still determined by the trace, for the following reason.

The autograd engine runs the nodes of one backward pass from a single ready
queue, highest sequence number first.  The unexecuted node with the highest
sequence number always has all its consumers executed (consumers are created
later, so they have higher numbers), hence it is ready and is the next one
run: nodes execute in exactly the reverse order of their creation.  So, for
one kind of node (``MmBackward0``), the k-th one run pairs with the k-th last
forward op of that kind (``aten::mm``) in the forward pass before it.

The rule links a kind only where it can check itself: the backward pass runs
on one thread, and the number of nodes of that kind equals the number of
forward ops of that kind.  Otherwise it links nothing (a gap, never a guess).
Node kinds with no forward op (``AccumulateGrad``, ``CppNode<...>``,
TorchScript graphs) are never linked.
"""

from __future__ import annotations

import re
from collections import defaultdict

import polars as pl

from kinetolens.model import direction as dirn

_WRAPPER = "autograd::engine::evaluate_function: "
_NODE_SUFFIX = re.compile(r"Backward\d*$")
_ATEN = "aten::"


def node_key(name: str) -> str | None:
    """``MaxPool2DWithIndicesBackward0`` -> ``maxpool2dwithindices``; None for engine nodes."""
    name = name.removeprefix(_WRAPPER)
    if "::" in name or "<" in name:
        return None
    stripped = _NODE_SUFFIX.sub("", name)
    if stripped == name or not stripped:
        return None
    return stripped.lower()


def op_key(name: str) -> str | None:
    """``aten::max_pool2d_with_indices`` -> ``maxpool2dwithindices``; None for non-aten ops.

    In-place (``relu_``), private (``_log_softmax``) and ``_forward``
    (``nll_loss_forward``) spellings name the same node kind.
    """
    if not name.startswith(_ATEN):
        return None
    base = name[len(_ATEN) :].strip("_")
    base = base.removesuffix("_forward")
    return base.replace("_", "").lower() or None


def pair_by_order(ops: pl.DataFrame, direction: list[str], bwd_root: list[int | None]) -> dict[int, int]:
    """Backward root op -> forward op, from creation order (see module doc).

    ``ops`` is in op_id order with ``name``, ``kind``, ``tid``, ``ts`` and
    ``parent_id``; ``direction`` and ``bwd_root`` are indexed by op_id.
    """
    names = ops["name"].to_list()
    kinds = ops["kind"].cast(pl.String).to_list()
    parents = ops["parent_id"].to_list()
    tids = ops["tid"].to_list()
    events = _timeline(names, kinds, parents, direction, bwd_root)
    pairs: dict[int, int] = {}
    window: dict[str, list[int]] = defaultdict(list)
    backward_pass: list[tuple[str, int]] = []
    for key, i, is_root in events:
        if is_root:
            backward_pass.append((key, i))
            continue
        if backward_pass:
            pairs.update(_match(backward_pass, window, tids))
            backward_pass = []
            window = defaultdict(list)
        window[key].append(i)
    if backward_pass:
        pairs.update(_match(backward_pass, window, tids))
    return pairs


def _timeline(
    names: list[str | None],
    kinds: list[str],
    parents: list[int | None],
    direction: list[str],
    bwd_root: list[int | None],
) -> list[tuple[str, int, bool]]:
    """Backward roots and candidate forward ops, in start order (op_id order).

    Of a chain of nested ops with one key (``aten::div`` inside
    ``aten::div``, ``aten::_convolution`` inside ``aten::convolution``) only
    the outermost is a candidate: one call, one node.  It is the op that
    records the sequence number in traces that have them, except where a
    composite op wraps the creator under a private name
    (``aten::log_softmax`` around ``aten::_log_softmax``); the pair is then
    the creator's enclosing op, the same call.
    """
    n = len(names)
    keys: list[str | None] = [None] * n
    for i in range(n):
        if direction[i] == dirn.FPROP and kinds[i] == "op":
            keys[i] = op_key(names[i] or "")
    shadowed = [False] * n
    for i in range(n):
        p = parents[i]
        if keys[i] is not None and p is not None and keys[p] == keys[i]:
            shadowed[i] = True
    events: list[tuple[str, int, bool]] = []
    for i in range(n):
        if bwd_root[i] == i:
            key = node_key(names[i] or "")
            if key is not None:
                events.append((key, i, True))
        elif keys[i] is not None and not shadowed[i]:
            events.append((keys[i], i, False))  # type: ignore[arg-type]
    return events


def _match(backward_pass: list[tuple[str, int]], window: dict[str, list[int]], tids: list[int | None]) -> dict[int, int]:
    """Pair one backward pass with the forward ops before it, kind by kind."""
    if len({tids[i] for _, i in backward_pass}) != 1:
        return {}
    nodes: dict[str, list[int]] = defaultdict(list)
    for key, i in backward_pass:
        nodes[key].append(i)
    pairs: dict[int, int] = {}
    for key, roots in nodes.items():
        forward = window.get(key, [])
        if len(forward) != len(roots):
            continue
        for root, fwd in zip(roots, reversed(forward)):
            pairs[root] = fwd
    return pairs
