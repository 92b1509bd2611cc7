"""One open store per path: an exclusive file lock that a killed process leaves behind harmlessly;
and making a folder's entries durable.

Embedded engines (the jsonl store, Qdrant Edge, embedded Chroma) are not safe
with two writers on one folder. :func:`lock_path` takes a non-blocking
``flock`` on a lock file: a second opener, in this process or another, gets
:class:`~memcore.errors.StoreLockedError` at once. The kernel drops the lock
when the holder exits, however it exits, so a killed process never blocks a
later reopen.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from memcore.errors import StoreLockedError

_BUSY = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)


def lock_path(lock_file: Path, *, what: str, advice: str) -> int:
    """Take the lock on ``lock_file`` (created with mode 0600) and record this process's id in it.

    :param what: the store, for the error message ("the jsonl store at /data").
    :param advice: what the user can do instead, for the error message.
    :returns: the file descriptor holding the lock; close it to release the lock.
    :raises StoreLockedError: if another open store holds the lock (the message names its process).
    :raises OSError: if the lock file cannot be created.
    """
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if exc.errno in _BUSY:
            raise StoreLockedError(
                f"{what} is open in another process or store object (process {holder}); {advice}"
            ) from None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (new, renamed or removed files, lock files, markers) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
