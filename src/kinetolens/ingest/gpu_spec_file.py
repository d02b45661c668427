"""A user's GPU spec file (TOML or JSON): the fields that replace a table entry's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kinetolens.errors import TraceError
from kinetolens.registry.gpus import SpecFields


def read_spec_file(path: str) -> SpecFields:
    """A TOML or JSON table (chosen by the file suffix, TOML by default)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise TraceError(path, "GPU spec file not found") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read GPU spec file ({exc.strerror})") from None
    if path.lower().endswith(".json"):
        try:
            parsed = json.loads(data)
        except ValueError as exc:
            raise TraceError(path, f"GPU spec file is not valid JSON ({exc})") from None
    else:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            raise TraceError(path, "TOML GPU spec files need Python 3.11+; write it as JSON") from None
        try:
            parsed = tomllib.loads(data.decode("utf-8", errors="replace"))
        except tomllib.TOMLDecodeError as exc:
            raise TraceError(path, f"GPU spec file is not valid TOML ({exc})") from None
    if not isinstance(parsed, dict):
        raise TraceError(path, "GPU spec file must hold one table of fields (name, dram_gbps, sms, memory_gb, [tflops])")
    return SpecFields(path, parsed)
