"""Capture: the only part of kinetolens that touches torch, and only lazily.

``profile`` and ``step`` are importable without torch; torch is imported when
a profile starts.  ``kinetolens run`` (see :mod:`kinetolens.capture.launch`)
profiles an unmodified script via :mod:`kinetolens.capture.runner`.
``nvtx`` marks ops for Nsight Systems instead of recording a Kineto trace.
"""

from __future__ import annotations

from kinetolens.capture.counters import CaptureUnsupportedError
from kinetolens.capture.nvtx import nvtx
from kinetolens.capture.profile import Profile, profile, step

__all__ = ["CaptureUnsupportedError", "Profile", "nvtx", "profile", "step"]
