"""One engine and one lock per embedded path, per process, and one process per path.

Neither Qdrant Edge nor qdrant-client's local mode may be opened twice on one
folder, and local mode loses writes when threads share it unguarded. So every
store object opened on a path in this process shares one :class:`OpenPath`
(the engine, an ``RLock`` serialising calls, a count of users), and the first
one takes an exclusive ``flock`` on ``<path>/.lock``: a second process gets
:class:`~memcore.errors.StoreLockedError`. The operating system releases the
lock of a killed process.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from memcore.errors import StoreError, StoreLockedError
from memcore_qdrant.engine import Engine

LOCK_FILE = ".lock"
DIR_MODE = 0o700


@dataclass
class OpenPath:
    """An embedded path opened in this process: its engine and the lock every call takes."""

    path: Path
    engine: Engine
    kind: str
    lock_fd: int
    lock: threading.RLock = field(default_factory=threading.RLock)
    users: int = 1


_open: dict[Path, OpenPath] = {}
_registry_lock = threading.Lock()


def acquire(path: Path, kind: str, open_engine: Callable[[Path], Engine]) -> OpenPath:
    """Open (or share) the engine of an embedded path.

    :param path: the store's folder; created (mode 0700) if missing.
    :param kind: which engine, so that two engines are never mixed on one path.
    :param open_engine: opens the engine on the folder, once the lock is held.
    :raises StoreLockedError: if another process holds the folder, or this
        process has it open with another engine.
    """
    key = path.expanduser().resolve()
    with _registry_lock:
        opened = _open.get(key)
        if opened is not None:
            if opened.kind != kind:
                raise StoreLockedError(f"{key} is already open in this process with the {opened.kind} engine")
            opened.users += 1
            return opened
        try:
            key.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            fd = _lock(key)
        except OSError as exc:
            raise StoreError(f"cannot open the Qdrant store at {key}: {exc}") from None
        try:
            engine = open_engine(key)
        except BaseException:
            os.close(fd)
            raise
        opened = _open[key] = OpenPath(key, engine, kind, fd)
        return opened


def release(opened: OpenPath) -> None:
    """Stop using a path; the last user closes the engine and releases the file lock."""
    with _registry_lock:
        opened.users -= 1
        if opened.users > 0:
            return
        del _open[opened.path]
        try:
            with opened.lock:
                opened.engine.close()
        finally:
            os.close(opened.lock_fd)


def _lock(folder: Path) -> int:
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise StoreLockedError(
                f"the Qdrant store at {folder} is open in another process ({holder}); "
                "close it there first, or run a Qdrant server for several processes"
            ) from None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd
