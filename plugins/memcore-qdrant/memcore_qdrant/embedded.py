"""One engine and one lock per embedded path, per process, and one process per path.

Neither Qdrant Edge nor qdrant-client's local mode may be opened twice on one
folder, and local mode loses writes when threads share it unguarded. Every store
object opened on a path in this process shares one :class:`SerialEngine` (the
engine and a :class:`ProcessLock` serialising its calls) through memcore's
:class:`~memcore.engine_registry.EngineRegistry`, which also locks the folder
against other processes (``<path>/.lock``) and forgets the parent's folders in a
forked child. The inherited shards are never dropped in a child either (see
:func:`memcore_qdrant.engine.keep_forever`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from memcore.engine_registry import EngineRegistry, OpenFolder
from memcore.locking import make_private
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


@dataclass(frozen=True)
class SerialEngine:
    """An embedded engine and the lock every call of it takes (local mode loses writes unguarded)."""

    engine: Engine
    lock: ProcessLock


_folders: EngineRegistry[SerialEngine] = EngineRegistry(
    LOCK_FILE, "Qdrant store", advice="close it there first, or run a Qdrant server for several processes"
)


def acquire(path: Path, kind: str, open_engine: Callable[[Path], Engine]) -> OpenFolder[SerialEngine]:
    """Open (or share) the engine of an embedded path (see :meth:`EngineRegistry.acquire`).

    :param kind: which engine, so that two engines are never mixed on one path.
    :raises StoreLockedError: if another process holds the folder, or this process has it open
        with another engine.
    """
    return _folders.acquire(path, kind, lambda key: SerialEngine(open_engine(key), ProcessLock()))


def release(opened: OpenFolder[SerialEngine]) -> None:
    """Stop using a path; the last user closes the engine and releases the file lock."""
    _folders.release(opened, _close)


def _close(opened: OpenFolder[SerialEngine]) -> None:
    with opened.engine.lock:
        opened.engine.engine.close()
        make_private(opened.path)  # the files Qdrant Edge made since the open
