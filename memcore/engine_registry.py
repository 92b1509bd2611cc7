"""One embedded engine per folder and process, and one process per folder: written once for every backend.

An embedded engine (Qdrant Edge, Chroma's ``PersistentClient``) may not be opened twice
on one folder, and is not process-safe. So every store object that opens a folder in
this process shares one :class:`OpenFolder` (the engine, a count of users), and the first
one takes an exclusive ``flock`` on a lock file in the folder: a second process gets
:class:`~memcore.errors.StoreLockedError`. The operating system releases the lock of a
killed process.

A child made by ``fork()`` inherits the parent's memory and open files.
:class:`memcore.store.BaseStore` refuses every call of an embedded store object in a
process other than its opener's (:class:`~memcore.errors.StoreForkedError`) and closes
nothing there. What is left to this module: the child forgets the parent's folders (and
closes its copies of their lock files, which keep the lock held only through the
parent's), so opening a folder again in the child gets
:class:`~memcore.errors.StoreLockedError` while the parent holds it; and a release in the
child leaves the parent's engine alone.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from memcore.errors import InvalidInputError, StoreError, StoreLockedError
from memcore.locking import PRIVATE_DIR_MODE, lock_path, make_private, unlock

E = TypeVar("E")


@dataclass(eq=False)
class OpenFolder(Generic[E]):
    """A folder opened in this process: its engine, and how many store objects use it.

    :param pid: the process that opened it (a forked child's release leaves it alone).
    """

    path: Path
    engine: E
    kind: str
    lock_fd: int
    users: int = 1
    pid: int = field(default_factory=os.getpid)
    closed: threading.Event = field(default_factory=threading.Event)


class EngineRegistry(Generic[E]):
    """The folders of one backend opened in this process.

    :param lock_file: the name of the lock file inside each folder.
    :param what: how messages name a store (``"Qdrant store"``).
    :param advice: what to do when another process holds the folder.
    """

    def __init__(self, lock_file: str, what: str, advice: str) -> None:
        self.lock_file, self.what, self.advice = lock_file, what, advice
        self._open: dict[Path, OpenFolder[E]] = {}
        self._lock = threading.Lock()
        _registries.add(self)

    def acquire(self, path: Path, kind: str, open_engine: Callable[[Path], E]) -> OpenFolder[E]:
        """Open (or share) the engine of a folder.

        :param path: the folder; created if missing, made private (0700, files 0600).
        :param kind: which engine, so that two engines are never mixed on one folder.
        :param open_engine: opens the engine on the folder, once the lock is held.
        :raises StoreLockedError: if another process holds the folder, or this process has it
            open with another engine.
        :raises InvalidInputError: if the path is not a valid file name (a NUL byte).
        """
        try:
            key = path.expanduser().resolve()
        except (ValueError, OSError) as exc:
            raise InvalidInputError(f"invalid path for a {self.what} {str(path)!r}: {exc}") from None
        while True:
            with self._lock:
                opened = self._open.get(key)
                if opened is None:
                    return self._open_folder(key, kind, open_engine)
                if opened.users > 0:
                    if opened.kind != kind:
                        raise StoreLockedError(
                            f"{key} is already open in this process with the {opened.kind} engine"
                        )
                    opened.users += 1
                    return opened
            opened.closed.wait()  # its last user is closing it: open it afresh once that is done

    def _open_folder(self, key: Path, kind: str, open_engine: Callable[[Path], E]) -> OpenFolder[E]:
        """Lock the folder and open its engine; called with the registry's lock held."""
        try:
            key.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
            fd = lock_path(key / self.lock_file, what=f"the {self.what} at {key}", advice=self.advice)
            try:
                make_private(key)  # a folder made beforehand may be 0755, its files 0644
            except OSError:
                unlock(fd)
                raise
        except OSError as exc:
            raise StoreError(f"cannot open the {self.what} at {key}: {exc}") from None
        try:
            engine = open_engine(key)
        except BaseException:
            unlock(fd)
            raise
        opened = self._open[key] = OpenFolder(key, engine, kind, fd)
        return opened

    def release(self, opened: OpenFolder[E], close_engine: Callable[[OpenFolder[E]], None]) -> None:
        """Stop using a folder; the last user closes the engine and releases the lock.

        The engine is closed outside the registry's lock, so that closing one store never holds
        up opening another; whoever opens this folder meanwhile waits for the close to finish.
        In a forked child this does nothing: the engine is the parent's.

        :param close_engine: closes the engine (called once, by the last user, lock still held).
        """
        if opened.pid != os.getpid():
            return
        with self._lock:
            opened.users -= 1
            if opened.users > 0:
                return
        try:
            close_engine(opened)
        finally:
            unlock(opened.lock_fd)
            with self._lock:
                del self._open[opened.path]
            opened.closed.set()

    def _forget_after_fork(self) -> None:
        self._lock = threading.Lock()  # a parent thread may have held it at the fork
        self._open.clear()  # memcore.locking closed this process's copies of their lock descriptors


_registries: weakref.WeakSet[EngineRegistry[Any]] = weakref.WeakSet()


def _forget_after_fork() -> None:
    """In a forked child: drop the parent's open folders, which are not this process's to use."""
    for registry in list(_registries):
        registry._forget_after_fork()


os.register_at_fork(after_in_child=_forget_after_fork)
