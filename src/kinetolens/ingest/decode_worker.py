"""A decoding process of :mod:`kinetolens.ingest.kineto_parallel`.

Reads length-prefixed pieces of a trace's event array on stdin until EOF and
answers each with its frames (see ``write_frames``).  Run as
``python -m kinetolens.ingest.decode_worker PATH``; PATH only names the file
in error messages, the worker never opens it.
"""

from __future__ import annotations

import sys

from kinetolens._allocator import keep_freed_heap, tune_allocator
from kinetolens.ingest.kineto_parallel import _LENGTH, decode_piece_frames, write_frames


def main() -> None:
    path = sys.argv[1]
    # Started with the allocator options in its environment (worker_env);
    # workers only run for big traces, and churn piece-sized buffers.
    tune_allocator()
    keep_freed_heap()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while header := stdin.read(_LENGTH.size):
        (n,) = _LENGTH.unpack(header)
        write_frames(stdout, decode_piece_frames(path, stdin.read(n)))


if __name__ == "__main__":
    main()
