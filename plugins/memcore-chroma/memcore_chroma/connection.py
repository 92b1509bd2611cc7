"""Chroma clients: one per embedded path and process, ephemeral ones, HTTP ones.

Embedded Chroma is thread-safe but not process-safe: two processes writing one
persist directory corrupt it. So the stores of a path share one ``PersistentClient``
(with its write lock) per process, through memcore's
:class:`~memcore.engine_registry.EngineRegistry`: the first takes an exclusive
``flock`` on ``<path>/memcore.lock``, the last to close releases both, a second
process gets :class:`~memcore.errors.StoreLockedError`, and a forked child forgets
the parent's clients.

Chroma's Rust core opens the SQLite file with its own SQLite library, whose
locks do not exclude Python's ``sqlite3``. So every call into a client holds
its :class:`ReadWriteLock` shared, and ``purge()`` holds it exclusive while it
closes the client, runs ``VACUUM`` and reopens the client
(:meth:`Connection.restart`); stores then fetch their collection handles anew.
Opening a store with a changed ``ef_search`` restarts the client the same way,
so that Chroma reloads the indexes it had loaded with the old value.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import chromadb
import httpx
from chromadb.api import ClientAPI
from chromadb.config import Settings
from chromadb.errors import NotFoundError

from memcore import locking
from memcore.engine_registry import EngineRegistry, OpenFolder
from memcore.errors import StoreError
from memcore_chroma import erasure, planner, recovery
from memcore_chroma.errors import translated

LOCK_FILE = "memcore.lock"


def make_private(root: Path) -> None:
    """:func:`memcore.locking.make_private` on the store's folder: at open (``root`` 0700 keeps
    other users out of what Chroma creates under it later: its SQLite file, index folders and
    files), after a ``purge()`` (which makes new index files) and at close.

    :raises StoreError: if a mode cannot be changed (a folder of another user).
    """
    try:
        locking.make_private(root)
    except OSError as exc:
        raise StoreError(f"cannot make the Chroma store at {root} private to its owner: {exc}") from None


def client_settings() -> Settings:
    """Settings for every client: no telemetry (no network beyond the server itself)."""
    return Settings(anonymized_telemetry=False)


class ReadWriteLock:
    """Many holders of :meth:`shared` access, or one of :meth:`exclusive` access.

    Shared access is re-entrant per thread, and free for the thread holding
    exclusive access. A waiting exclusive request keeps new threads from
    taking shared access, so that it is not starved.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer: int | None = None
        self._writer_depth = 0
        self._writers_waiting = 0
        self._local = threading.local()

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Hold shared access for the block."""
        me = threading.get_ident()
        depth: int = getattr(self._local, "depth", 0)
        if self._writer == me:
            yield
            return
        with self._condition:
            if not depth:
                while self._writer is not None or self._writers_waiting:
                    self._condition.wait()
            self._readers += 1
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            with self._condition:
                self._readers -= 1
                if not self._readers:
                    self._condition.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold exclusive access for the block (not from inside :meth:`shared`)."""
        me = threading.get_ident()
        if getattr(self._local, "depth", 0):
            raise RuntimeError("exclusive access requested while holding shared access")
        with self._condition:
            if self._writer != me:
                self._writers_waiting += 1
                try:
                    while self._writer is not None or self._readers:
                        self._condition.wait()
                finally:
                    self._writers_waiting -= 1
                self._writer = me
            self._writer_depth += 1
        try:
            yield
        finally:
            with self._condition:
                self._writer_depth -= 1
                if not self._writer_depth:
                    self._writer = None
                    self._condition.notify_all()


@dataclass(eq=False)
class SharedClient:
    """One chromadb client and the locks of everything that uses it.

    :param client: the chromadb client (replaced by :meth:`Connection.restart`).
    :param reopen: makes a new client after :meth:`Connection.restart` closed this one
        (embedded clients only).
    :param write_lock: serialises this process's writes through the client
        (reading the entries an upsert replaces, metadata, rebuilds, purges).
    :param access: every call into the client holds it shared; closing the client
        (and running SQLite ``VACUUM`` beside it) holds it exclusive.
    :param generation: bumped whenever collection handles must be fetched anew
        (the client was reopened, or a collection was swapped for a rebuilt copy).
    :param growth: when the embedded folder's SQLite planner statistics are due again
        (:mod:`memcore_chroma.planner`; ``None`` for a server or memory, out of reach).
    """

    client: ClientAPI
    reopen: Callable[[], ClientAPI] | None = None
    growth: planner.Growth | None = None
    write_lock: threading.RLock = field(default_factory=threading.RLock)
    access: ReadWriteLock = field(default_factory=ReadWriteLock)
    generation: int = 0


@dataclass(eq=False)
class Connection:
    """A store's share of a Chroma client.

    :param shared: the client and its locks, shared by the stores of one embedded path.
    :param persist_path: the embedded persist directory, ``None`` for a server or memory.
    :param release: called once by the store that closes this connection.
    :param counts_deletes: whether ``delete`` reports how many records it deleted: chromadb
        in this process does; a server of another version may not (its client then says 0).
    """

    shared: SharedClient
    persist_path: Path | None
    release: Callable[[], None]
    counts_deletes: bool = True

    @property
    def client(self) -> ClientAPI:
        """The current chromadb client (call it while holding :meth:`reading`)."""
        return self.shared.client

    @property
    def write_lock(self) -> threading.RLock:
        """Serialises this process's writes through the client."""
        return self.shared.write_lock

    @property
    def generation(self) -> int:
        """Changes whenever collection handles taken before are stale."""
        return self.shared.generation

    def wrote(self, entries: int) -> None:
        """``entries`` were written (hold the write lock): gather the planner statistics if due."""
        if self.shared.growth is not None:
            self.shared.growth.wrote(entries)

    def reading(self) -> AbstractContextManager[None]:
        """Shared access: hold it around every call into the client."""
        return self.shared.access.shared()

    def exclusive(self) -> AbstractContextManager[None]:
        """Exclusive access: no other thread is inside the client (take the write lock first)."""
        return self.shared.access.exclusive()

    def handles_changed(self) -> None:
        """Make every store on this client fetch its collection handle anew."""
        self.shared.generation += 1

    def restart(self, while_closed: Callable[[], None]) -> None:
        """Close the client, run ``while_closed``, and open a new client (holding :meth:`exclusive`).

        Closing the embedded client releases Chroma's own SQLite connections,
        so that ``while_closed`` may use the file alone. The client is reopened
        even when ``while_closed`` fails.

        :raises StoreError: if the client cannot be closed or reopened.
        """
        reopen = self.shared.reopen
        if reopen is None:
            while_closed()
            return
        close_client(self.shared.client)
        try:
            while_closed()
        finally:
            self.shared.generation += 1
            with translated("reopening the Chroma client"):
                self.shared.client = reopen()


_folders: EngineRegistry[SharedClient] = EngineRegistry(
    LOCK_FILE,
    "Chroma store",
    advice="embedded Chroma is not process-safe: close that process, or run a Chroma server (chroma+http://)",
)


def _persistent_client(path: Path) -> ClientAPI:
    with translated(f"opening the Chroma store at {path}"):
        return chromadb.PersistentClient(path=str(path), settings=client_settings())


def persistent(path: Path) -> Connection:
    """The connection to the embedded store at ``path``, shared within this process.

    :raises StoreLockedError: if another process has the path open.
    :raises StoreError: if the folder cannot be created or Chroma cannot open it.
    """
    opened = _folders.acquire(path, "chroma", _open_shared)
    return Connection(opened.engine, opened.path, lambda: _folders.release(opened, _close))


def _open_shared(path: Path) -> SharedClient:
    client, growth = _open_recovered(path)
    make_private(path)
    return SharedClient(client, reopen=lambda: _persistent_client(path), growth=growth)


def _open_recovered(path: Path) -> tuple[ClientAPI, planner.Growth]:
    """The client of ``path`` (lock held), after recovering from a process that died with it open,
    and the folder's growth (its planner statistics gathered first if due).

    See :mod:`memcore_chroma.recovery`: the log is kept whole from creation on; a
    folder whose open marker survived gets its vector indexes rebuilt from the log.
    """
    with translated(f"preparing the Chroma store at {path}"):
        if recovery.needs_recovery(path):
            recovery.reset_vector_indexes(path)
        new = not (path / erasure.SQLITE_FILE).exists()
        if new:
            close_client(_persistent_client(path))  # creates the SQLite file, whose log setting we change
        whole = new or (path / recovery.LOG_COMPLETE).exists() or recovery.log_never_trimmed(path)
        # On every open: a chromadb upgrade could reset the setting.
        if recovery.keep_whole_log(path) and whole:
            recovery.mark(path, recovery.LOG_COMPLETE)
        else:
            recovery.unmark(path, recovery.LOG_COMPLETE)
        growth = planner.Growth.at_open(path)
    client = _persistent_client(path)
    try:
        with translated(f"opening the Chroma store at {path}"):
            recovery.mark(path, recovery.OPEN_MARKER)
    except BaseException:
        close_client(client)
        raise
    return client, growth


def _close(opened: OpenFolder[SharedClient]) -> None:
    shared, path = opened.engine, opened.path
    with shared.write_lock, shared.access.exclusive():
        close_client(shared.client)
        # Chroma rewrites small indexes' files on a client's first read, spare slots included
        # (see memcore_chroma.erasure): zero those again before the folder is left alone.
        _scrub_or_drop_indexes(path)
        recovery.unmark(path, recovery.OPEN_MARKER)
        make_private(path)


def _scrub_or_drop_indexes(path: Path) -> None:
    """Scrub the index files (see :mod:`memcore_chroma.erasure`); files of a layout the scrub does
    not know are dropped instead, for Chroma to rebuild them from its log at the next open."""
    try:
        erasure.scrub_vector_indexes(path)
    except StoreError:
        if not (path / recovery.LOG_COMPLETE).exists():
            raise
        recovery.reset_vector_indexes(path)


def close_client(client: ClientAPI) -> None:
    """Release a client's share of chromadb's per-location system (stopped with its last client)."""
    with translated("closing the Chroma client"):
        client.close()  # type: ignore[attr-defined]  # on chromadb's Client, not on ClientAPI


def ephemeral() -> Connection:
    """A connection to an in-memory Chroma (which chromadb shares within the process)."""
    with translated("starting an in-memory Chroma"):
        client = chromadb.EphemeralClient(settings=client_settings())
    return Connection(SharedClient(client), None, lambda: close_client(client))


def http(host: str, port: int, ssl: bool, tenant: str, database: str) -> Connection:
    """A connection to a Chroma server.

    :raises StoreUnavailableError: if the server cannot be reached.
    :raises StoreError: if the server has no such tenant or database.
    """
    action = f"connecting to the Chroma server at {host}:{port}"
    try:
        with translated(action):
            client = chromadb.HttpClient(
                host=host, port=port, ssl=ssl, tenant=tenant, database=database, settings=client_settings()
            )
    except StoreError as exc:
        if isinstance(exc.__cause__, NotFoundError):
            raise StoreError(
                f"the Chroma server at {host}:{port} has no tenant {tenant!r} with a database "
                f"{database!r} ({exc.__cause__}); check ?tenant= and ?database=, or create them "
                "on the server first"
            ) from exc.__cause__
        raise
    return Connection(SharedClient(client), None, lambda: _close_http_client(client), counts_deletes=False)


def _close_http_client(client: ClientAPI) -> None:
    """Close an ``HttpClient`` and its HTTP connections: chromadb's ``close()`` stops the systems of
    the client and of its admin client (each with an ``httpx.Client`` of its own) but leaves their
    connections open, two sockets per store opened and closed."""
    close_client(client)
    for owner in (client, getattr(client, "_admin_client", None)):
        session = getattr(getattr(owner, "_server", None), "_session", None)
        if isinstance(session, httpx.Client):
            session.close()
