"""Which recorded GPU a kernel ran on, and what to call it.

A trace lists its GPUs (``deviceProperties``) by id, and each kernel names
its device; the two numberings need not agree (a HIP kernel's device can be
the ROCm agent's index: kernels on device 9 of a trace listing only id 0).
Where they do not, a kernel's device is the listed one only when that
choice cannot be wrong: one GPU listed, or every listed GPU the same model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kinetolens.registry.gpus import SPECS, identify

#: The properties that make two listed GPUs the same model.
_MODEL_KEYS = ("name", "totalGlobalMem", "computeMajor", "computeMinor", "numSms", "warpSize")


def device_properties(devices: Sequence[Mapping[str, Any]], device_id: int | None) -> Mapping[str, Any] | None:
    """The listed properties of the GPU a kernel calls ``device_id``, or None when the listing cannot say."""
    if not devices:
        return None
    for d in devices:
        if d.get("id") == device_id:
            return d
    models = {tuple(d.get(k) for k in _MODEL_KEYS) for d in devices}
    return devices[0] if len(models) == 1 else None


def device_name(device: Mapping[str, Any] | None) -> str | None:
    """The recorded name, else the table entry its properties identify (``MI300X (by its properties)``)."""
    if device is None:
        return None
    name = device.get("name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    known = identify(device)
    return f"{SPECS[known].source.split(' datasheet')[0]} (by its properties)" if known else None
