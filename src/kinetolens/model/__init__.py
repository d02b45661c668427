"""The attributed trace model built from raw ingest tables."""

from kinetolens.model.build import build_trace
from kinetolens.model.trace import Trace

__all__ = ["Trace", "build_trace"]
