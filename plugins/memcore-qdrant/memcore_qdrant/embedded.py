"""One engine and one lock per embedded path, per process, and one process per path.

Neither Qdrant Edge nor qdrant-client's local mode may be opened twice on one
folder, and local mode loses writes when threads share it unguarded. So every
store object opened on a path in this process shares one :class:`OpenPath`
(the engine, a :class:`ProcessLock` serialising calls, a count of users), and
the first one takes an exclusive ``flock`` on ``<path>/.lock``: a second process
gets :class:`~memcore.errors.StoreLockedError`. The operating system releases
the lock of a killed process.

A child made by ``fork()`` is another process too, though it inherits the
parent's memory and open files. :class:`memcore.store.BaseStore` refuses every
call of a store object in a process other than its opener's
(:class:`~memcore.errors.StoreForkedError`) and closes nothing there. What is
left to this module: the child forgets the parent's registry (and closes its
copies of the lock files, which keep the lock held only through the parent's),
so opening the path again in the child gets
:class:`~memcore.errors.StoreLockedError` while the parent holds it; a release
in the child leaves the parent's engine alone; and the inherited shards are
never dropped there (see :func:`memcore_qdrant.engine.keep_forever`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from memcore.errors import InvalidInputError, StoreError, StoreLockedError
from memcore.locking import PRIVATE_DIR_MODE, lock_path, make_private
from memcore_qdrant.engine import Engine

LOCK_FILE = ".lock"


class ProcessLock:
    """A re-entrant lock serialising an engine's calls, which knows the process that made it.

    Store calls in a forked child never get here (the core refuses them first);
    :meth:`owned` tells releases in such a child to leave the parent's engine alone.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.RLock()

    def owned(self) -> bool:
        """Whether this process is the one that opened the store."""
        return os.getpid() == self.pid

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.release()


@dataclass
class OpenPath:
    """An embedded path opened in this process: its engine and the lock every call takes."""

    path: Path
    engine: Engine
    kind: str
    lock_fd: int
    lock: ProcessLock
    users: int = 1
    closed: threading.Event = field(default_factory=threading.Event)


_open: dict[Path, OpenPath] = {}
_registry_lock = threading.Lock()


def _forget_after_fork() -> None:
    """In a forked child: drop the parent's open paths, which are not this process's to use."""
    global _registry_lock
    _registry_lock = threading.Lock()  # a parent thread may have held it at the fork
    for opened in _open.values():
        with contextlib.suppress(OSError):
            os.close(opened.lock_fd)  # the parent's copy keeps the flock held
    _open.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def acquire(path: Path, kind: str, open_engine: Callable[[Path], Engine]) -> OpenPath:
    """Open (or share) the engine of an embedded path.

    :param path: the store's folder; created if missing, made private (0700, files 0600).
    :param kind: which engine, so that two engines are never mixed on one path.
    :param open_engine: opens the engine on the folder, once the lock is held.
    :raises StoreLockedError: if another process holds the folder, or this
        process has it open with another engine.
    :raises InvalidInputError: if the path is not a valid file name (a NUL byte).
    """
    try:
        key = path.expanduser().resolve()
    except (ValueError, OSError) as exc:
        raise InvalidInputError(f"invalid path for a Qdrant store {str(path)!r}: {exc}") from None
    while True:
        with _registry_lock:
            opened = _open.get(key)
            if opened is None:
                return _open_path(key, kind, open_engine)
            if opened.users > 0:
                if opened.kind != kind:
                    raise StoreLockedError(
                        f"{key} is already open in this process with the {opened.kind} engine"
                    )
                opened.users += 1
                return opened
        opened.closed.wait()  # its last user is closing it: open it afresh once that is done


def _open_path(key: Path, kind: str, open_engine: Callable[[Path], Engine]) -> OpenPath:
    """Lock the folder and open its engine; called with the registry's lock held."""
    try:
        key.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        fd = lock_path(
            key / LOCK_FILE,
            what=f"the Qdrant store at {key}",
            advice="close it there first, or run a Qdrant server for several processes",
        )
        try:
            make_private(key)  # a folder made beforehand may be 0755, its files 0644
        except OSError:
            os.close(fd)
            raise
    except OSError as exc:
        raise StoreError(f"cannot open the Qdrant store at {key}: {exc}") from None
    try:
        engine = open_engine(key)
    except BaseException:
        os.close(fd)
        raise
    opened = _open[key] = OpenPath(key, engine, kind, fd, ProcessLock())
    return opened


def release(opened: OpenPath) -> None:
    """Stop using a path; the last user closes the engine and releases the file lock.

    The engine is closed outside the registry's lock, so that closing one store
    never holds up opening another; whoever opens this path meanwhile waits for
    the close to finish. In a forked child this does nothing: the engine is the parent's.
    """
    if not opened.lock.owned():
        return
    with _registry_lock:
        opened.users -= 1
        if opened.users > 0:
            return
    try:
        with opened.lock:
            opened.engine.close()
            make_private(opened.path)  # the files Qdrant Edge made since the open
    finally:
        os.close(opened.lock_fd)
        with _registry_lock:
            del _open[opened.path]
        opened.closed.set()
