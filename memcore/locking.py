"""One open store per path: an exclusive file lock that a killed process leaves behind harmlessly;
making a folder's entries durable; and keeping a store's folder private to its owner.

Embedded engines (the jsonl store, Qdrant Edge, embedded Chroma) are not safe
with two writers on one folder. :func:`lock_path` takes a non-blocking
``flock`` on a lock file: a second opener, in this process or another, gets
:class:`~memcore.errors.StoreLockedError` at once. The kernel drops the lock
when the holder exits, however it exits, so a killed process never blocks a
later reopen.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from pathlib import Path

from memcore.errors import StoreLockedError

_BUSY = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)
_held: set[int] = set()
"""The descriptors of the locks this process took (:func:`lock_path`) and holds."""


def lock_path(lock_file: Path, *, what: str, advice: str) -> int:
    """Take the lock on ``lock_file`` (created with mode 0600) and record this process's id in it.

    :param what: the store, for the error message ("the jsonl store at /data").
    :param advice: what the user can do instead, for the error message.
    :returns: the file descriptor holding the lock; :func:`unlock` releases it.
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
    _held.add(fd)
    return fd


def unlock(fd: int) -> None:
    """Release a lock :func:`lock_path` took."""
    _held.discard(fd)
    os.close(fd)


def _drop_inherited_locks() -> None:
    """In a forked child, close its copies of the parent's lock descriptors.

    The parent's own descriptors keep the locks held. A child that kept its copies would hold the
    parent's folders locked after the parent closed them, and could not open them itself.
    """
    for fd in _held:
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_drop_inherited_locks)


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (new, renamed or removed files, lock files, markers) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def make_private(root: Path) -> None:
    """Take every group and other permission off ``root`` and everything under it.

    Embedded engines create their files with the process's umask (0644, 0755 usually), also in
    a folder that existed beforehand with loose modes. Stores call this at open (``root`` 0700
    from then on keeps other users out of what the engine creates later) and again when they
    close, so that no file keeps a loose mode. Symbolic links are left alone (Linux cannot chmod
    a link, and following one could reach outside the store); entries removed meanwhile are
    skipped.

    :raises OSError: if a mode cannot be changed (an entry of another user).
    """
    _tighten(root, PRIVATE_DIR_MODE)
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            _tighten(Path(folder, name), PRIVATE_DIR_MODE)
        for name in files:
            _tighten(Path(folder, name), PRIVATE_FILE_MODE)


def _tighten(path: Path, mode: int) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISLNK(info.st_mode) and stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, stat.S_IMODE(info.st_mode) & mode)
