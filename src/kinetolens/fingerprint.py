"""A cheap content fingerprint of a file: its size and its first and last MiB.

Size and mtime alone say a file is unchanged when a copy or an editor kept
both (``cp -p``, ``rsync -t``, a rewrite within the mtime's resolution).
Hashing the whole file would cost as much as loading it, so the cache key
and the dashboard's in-memory store add a hash of the file's two ends,
where a trace's header and its last events are.  Reading 2 MiB is cheap
beside decoding a trace; the dashboard, which asks on every request, keeps
the answer while the file's stat (size, mtime, ctime, inode) stays the same.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

#: Bytes hashed at each end of the file.
END_BYTES = 1 << 20
#: Fingerprints remembered by :func:`file_fingerprint` (one per trace of a logdir).
MEMO_FILES = 4096

_memo: dict[tuple[str, int, int, int, int], str] = {}
_memo_lock = threading.Lock()


def content_fingerprint(path: str | Path, size: int | None = None) -> str:
    """Hash of the file's size and its first and last :data:`END_BYTES`."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        if size is None:
            size = os.fstat(fh.fileno()).st_size
        digest.update(str(size).encode())
        digest.update(fh.read(END_BYTES))
        if size > END_BYTES:
            fh.seek(max(END_BYTES, size - END_BYTES))
            digest.update(fh.read(END_BYTES))
    return digest.hexdigest()


def file_fingerprint(path: str | Path, st: os.stat_result) -> str:
    """:func:`content_fingerprint`, remembered while ``st`` (size, mtime,
    ctime, inode) is unchanged: any write to a file moves its ctime."""
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    with _memo_lock:
        hit = _memo.get(key)
    if hit is not None:
        return hit
    fp = content_fingerprint(path, st.st_size)
    with _memo_lock:
        if len(_memo) >= MEMO_FILES:
            _memo.clear()
        _memo[key] = fp
    return fp
