"""What ``import kinetolens`` costs a training process, checked in fresh interpreters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import kinetolens

CAPTURE_ONLY = """
import json, os, sys
before = dict(os.environ)
import kinetolens
kinetolens.profile, kinetolens.step, kinetolens.nvtx
print(json.dumps({
    "heavy": sorted(m for m in ("polars", "msgspec", "numpy", "torch", "kinetolens.loader", "kinetolens.model") if m in sys.modules),
    "env_changed": sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)),
}))
"""


def test_capture_imports_nothing_of_the_analyzer_and_leaves_the_environment_alone() -> None:
    # a training process that only captures pays for
    # neither polars (~150 ms) nor msgspec, and its environment (inherited by
    # DataLoader workers and torchrun children) is what it was.
    out = subprocess.run([sys.executable, "-c", CAPTURE_ONLY], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"heavy": [], "env_changed": []}


def test_the_analyzer_loads_on_first_use() -> None:
    # `load` and `Trace` still work as attributes.
    code = "import sys, kinetolens; t = kinetolens.Trace; print('polars' in sys.modules, kinetolens.load.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.split() == ["True", "kinetolens.loader"]


def test_dir_lists_the_public_api() -> None:
    # names resolved lazily are still discoverable.
    assert set(kinetolens.__all__) <= set(dir(kinetolens))
    for name in kinetolens.__all__:
        assert getattr(kinetolens, name) is not None
    assert {"load", "Trace", "profile", "tune_allocator"} <= set(dir(kinetolens))
