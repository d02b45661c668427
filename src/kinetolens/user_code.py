"""Which source files are the user's code, as opposed to torch's, Python's,
installed packages' or kinetolens' own.

One rule for both ends: capture uses it to pick the call sites it records
(``kinetolens.capture.call_sites``), the model to pick the frame it reports
as an op's source line (``kinetolens.model.frames``).  Imports nothing, so
capture stays light and the analyzer torch-free.
"""

from __future__ import annotations

import re

#: A file is library code when its path contains one of these.
INTERNAL_PATH_PARTS = (
    "torch/",
    "site-packages/",
    "dist-packages/",
    "<built-in",
    "<frozen",
    "threading.py",
    "runpy.py",
    "contextlib.py",
    "functools.py",
    "typing.py",
    "kinetolens/",
    "lib/python3",
    "torchinductor_",  # inductor's default cache dir: /tmp/torchinductor_<user>/
)

#: Inductor's generated wrapper modules, wherever $TORCHINDUCTOR_CACHE_DIR
#: puts them: ``<dir>/<2 chars>/c<hash>.py``.  Their frames are the compiler's
#: code, not the user's; the source line is the user frame that called them.
_GENERATED = re.compile(r"/[a-z0-9]{2}/c[a-z0-9]{40,}\.py$")


def is_user_file(path: str) -> bool:
    """True when ``path`` (as torch names a frame's file) is user code."""
    normalized = path.replace("\\", "/")
    return not any(part in normalized for part in INTERNAL_PATH_PARTS) and _GENERATED.search(normalized) is None
