"""Errors and warnings that name the file and what is wrong with it.

Every problem with an input file surfaces as a :class:`TraceError` whose
message is one line, so the CLI can print it and exit with status 2 instead of
showing a traceback.  Damage that still leaves a usable trace is reported as a
counted :class:`TraceWarning` on the loaded trace instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


def shown_path(path: str | Path) -> str:
    """``path`` as text that can be printed and written as JSON.

    A file name that is not UTF-8 reaches Python with its bytes as lone
    surrogates, which no UTF-8 writer accepts; they become U+FFFD.  For
    display and metadata only: open files with the path itself.
    """
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class TraceError(Exception):
    """A trace file that cannot be loaded.  ``str(err)`` is one line."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = " ".join(str(problem).split())
        super().__init__(f"{self.path}: {self.problem}")

    def __reduce__(self) -> tuple[object, ...]:
        # Rebuilt from (path, problem), not from the message: a worker
        # process's error must reach the parent whole (a process pool
        # unpickles it), with any attribute a subclass added.
        return (type(self), (self.path, self.problem), self.__dict__)


@dataclass(frozen=True)
class TraceWarning:
    """Recoverable damage found while loading: what, and how many times."""

    kind: str
    count: int
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail} ({self.count}x)"
