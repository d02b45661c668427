"""How the GPUs a trace lists relate to the devices its kernels ran on, in words.

Kineto lists ``deviceProperties`` by the index the process saw (``id 0``
under ``CUDA_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES``) while a kernel's
``device`` can be the physical index (ROCm writes ``2``): the per-GPU rows
then say ``GPU 2`` beside a listing of ``id 0``.  Where no listed id ran a
kernel, views say which devices did, so the two numbers read as one GPU.
"""

from __future__ import annotations

from collections.abc import Sequence


def unlisted_devices_note(listed_ids: Sequence[int | None], used: Sequence[int]) -> str | None:
    """``kernels ran on device 2`` where none of ``used`` is a listed id, else None."""
    if not used or set(used) & {i for i in listed_ids if i is not None}:
        return None
    which = ", ".join(map(str, used))
    return f"its kernels ran on device{'s' if len(used) > 1 else ''} {which}"
