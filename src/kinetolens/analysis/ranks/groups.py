"""Which parallel dimension a collective's process group serves, and why we say so.

Large jobs run several kinds of parallelism at once, each on its own process
groups: data parallel (DDP, FSDP's shard and replicate groups), tensor,
pipeline (send/recv between stages), context (sequence) and expert
(all-to-all among MoE experts or sharded embedding tables).  Their
collectives cost differently and are fixed differently, so ``dist`` reports
them per dimension.

The dimension is named from the best evidence the trace has, and the
``basis`` says which was used:

1. ``description``: torch records the group's description (``Process Group
   Description`` of ``record_param_comms``, ``pg_desc`` of
   ``distributedInfo``).  A DeviceMesh names its groups after the mesh
   dimension (``mesh_dp``, ``mesh_tp``, ``mesh_dp_shard``, ...): a known
   dimension name in it decides.
2. ``collective``: point-to-point send/recv is pipeline traffic; an
   all-to-all exchanges rows among shards (experts, embedding tables).
3. ``rank pattern``: the group's global ranks.  Launchers place the inner
   (fastest-communicating) dimension on consecutive ranks, so a group of
   contiguous ranks smaller than the world is tensor parallel, a group of
   evenly strided ranks is an outer, data-parallel one, and the whole world
   (the only group of plain DDP) is data parallel.
"""

from __future__ import annotations

import re

#: The dimensions, as reported.
DATA, TENSOR, PIPELINE, CONTEXT, EXPERT, UNKNOWN = "data", "tensor", "pipeline", "context", "expert", "unknown"
DIMENSIONS = (DATA, TENSOR, PIPELINE, CONTEXT, EXPERT, UNKNOWN)

#: Words of a group description (DeviceMesh dimension names, Megatron/torchtitan spellings) per dimension.
_DESCRIPTION_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (EXPERT, ("ep", "expert", "experts", "moe", "etp")),
    (PIPELINE, ("pp", "pipe", "pipeline", "stage")),
    (CONTEXT, ("cp", "context")),
    (TENSOR, ("tp", "tensor", "mp", "model")),
    (DATA, ("dp", "ddp", "fsdp", "hsdp", "shard", "replicate", "data", "zero", "dp_shard", "dp_replicate",
            "dp_cp", "default_pg", "world")),
)  # fmt: skip
_POINT_TO_POINT = ("sendrecv",)
_ALL_TO_ALL = ("alltoall",)


def parse_ranks(text: str | None) -> tuple[int, ...] | None:
    """``"[0, 2, 4]"`` -> ``(0, 2, 4)``; None where there is no list of ranks."""
    if not text:
        return None
    found = tuple(int(r) for r in re.findall(r"-?\d+", text))
    return found or None


def description_dimension(desc: str | None) -> str | None:
    """The dimension a group's description names (None: it names none, or it is the world group)."""
    if not desc:
        return None
    words = [w for w in re.split(r"[^a-z0-9]+", desc.lower()) if w]
    if "default" in words and "pg" in words:
        return None  # the world group: says nothing of what runs on it
    for dim, names in _DESCRIPTION_WORDS:
        if any(w in names for w in words):
            return dim
    return None


def _from_ranks(ranks: tuple[int, ...] | None, world_size: int | None) -> tuple[str, str]:
    if not ranks:
        if world_size:
            return DATA, f"rank pattern: no group ranks recorded, taken as the whole world of {world_size}"
        return UNKNOWN, "rank pattern: no group ranks and no world size recorded"
    ordered = sorted(set(ranks))
    shown = _show(ordered)
    if world_size and len(ordered) >= world_size:
        return DATA, f"rank pattern: the whole world ({shown})"
    steps = {b - a for a, b in zip(ordered, ordered[1:], strict=False)}
    if len(ordered) < 2:
        return UNKNOWN, f"rank pattern: a single rank ({shown})"
    if steps == {1}:
        return TENSOR, f"rank pattern: contiguous ranks {shown}, the inner dimension"
    if len(steps) == 1:
        return DATA, f"rank pattern: ranks strided by {steps.pop()} ({shown}), an outer dimension"
    return UNKNOWN, f"rank pattern: irregular ranks ({shown})"


def _show(ranks: list[int]) -> str:
    if len(ranks) <= 6:
        return ", ".join(map(str, ranks))
    return f"{ranks[0]}, {ranks[1]}, ..., {ranks[-1]}"


def group_dimension(
    desc: str | None, ranks_text: str | None, kind: str, world_size: int | None
) -> tuple[str, str]:
    """``(dimension, basis)`` of one collective call (see the module docstring)."""
    named = description_dimension(desc)
    if named is not None:
        return named, f"description: {desc!r}"
    if kind in _POINT_TO_POINT:
        return PIPELINE, "collective: send/recv between stages"
    if kind in _ALL_TO_ALL:
        return EXPERT, "collective: all-to-all (MoE experts, sharded embedding tables)"
    return _from_ranks(parse_ranks(ranks_text), world_size)
