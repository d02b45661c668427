"""kinetolens asks polars' allocator for one arena, only when it can and may.

Run in fresh interpreters: the setting only works before polars loads, so
the import order of the test process itself must not matter.
"""

from __future__ import annotations

import os
import subprocess
import sys

SHOW = "import os; print(os.environ.get('_RJEM_MALLOC_CONF'))"


def _conf(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    out = subprocess.run([sys.executable, "-c", code + "; " + SHOW], env={**clean, **env}, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_one_arena_is_appended_to_polars_own_options() -> None:
    # polars sets its decay options at import and appends ours after them.
    conf = _conf("import kinetolens, polars")
    assert conf.split(",")[-1] == "narenas:1"
    assert "dirty_decay_ms" in conf


def test_nothing_is_set_once_polars_is_loaded() -> None:
    # jemalloc has read its options by then; setting them would only mislead
    # child processes.
    assert "narenas" not in _conf("import polars, kinetolens")


def test_a_value_the_user_set_is_kept() -> None:
    assert _conf("import kinetolens, polars", _RJEM_MALLOC_CONF="narenas:4").endswith("narenas:4")
    assert "narenas" not in _conf("import kinetolens, polars", _RJEM_MALLOC_CONF="")
