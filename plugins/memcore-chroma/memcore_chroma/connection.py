"""Chroma clients: one per embedded path and process, ephemeral ones, HTTP ones.

Embedded Chroma is thread-safe but not process-safe: two processes writing one
persist directory corrupt it. So the first store that opens a path in a process
takes an exclusive ``flock`` on ``<path>/memcore.lock`` and creates the one
``PersistentClient`` of that path; later stores of the same process share it
(with its write lock), and the last one to close releases both. A second process
gets :class:`~memcore.errors.StoreLockedError`; the operating system releases
the lock of a killed process.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import chromadb
from chromadb.api import ClientAPI
from chromadb.config import Settings

from memcore.errors import StoreError, StoreLockedError
from memcore_chroma.errors import translated

LOCK_FILE = "memcore.lock"


def client_settings() -> Settings:
    """Settings for every client: no telemetry (no network beyond the server itself)."""
    return Settings(anonymized_telemetry=False)


@dataclass
class Connection:
    """A Chroma client and what the stores using it share.

    :param client: the chromadb client.
    :param write_lock: serialises this process's writes through the client
        (id-conflict checks, rebuilds, purges).
    :param persist_path: the embedded persist directory, ``None`` for a server or memory.
    :param release: called once by the store that closes this connection.
    """

    client: ClientAPI
    write_lock: threading.RLock
    persist_path: Path | None
    release: Callable[[], None]


@dataclass
class _SharedPath:
    client: ClientAPI
    lock_fd: int
    users: int = 0
    write_lock: threading.RLock = field(default_factory=threading.RLock)


_shared: dict[Path, _SharedPath] = {}
_shared_lock = threading.Lock()


def _take_file_lock(path: Path) -> int:
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise StoreLockedError(
                f"the Chroma store at {path} is open in another process ({holder}); embedded Chroma "
                "is not process-safe: close that process, or run a Chroma server (chroma+http://)"
            ) from None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def persistent(path: Path) -> Connection:
    """The connection to the embedded store at ``path``, shared within this process.

    :raises StoreLockedError: if another process has the path open.
    :raises StoreError: if the folder cannot be created or Chroma cannot open it.
    """
    path = path.expanduser().resolve()
    with _shared_lock:
        shared = _shared.get(path)
        if shared is None:
            try:
                path.mkdir(mode=0o700, parents=True, exist_ok=True)
                lock_fd = _take_file_lock(path)
            except OSError as exc:
                raise StoreError(f"cannot open the Chroma store at {path}: {exc}") from None
            try:
                with translated(f"opening the Chroma store at {path}"):
                    client = chromadb.PersistentClient(path=str(path), settings=client_settings())
            except BaseException:
                os.close(lock_fd)
                raise
            shared = _shared[path] = _SharedPath(client, lock_fd)
        shared.users += 1
    return Connection(shared.client, shared.write_lock, path, lambda: _release(path))


def _release(path: Path) -> None:
    with _shared_lock:
        shared = _shared[path]
        shared.users -= 1
        if shared.users:
            return
        del _shared[path]
    try:
        close_client(shared.client)
    finally:
        os.close(shared.lock_fd)


def close_client(client: ClientAPI) -> None:
    """Release a client's share of chromadb's per-location system (stopped with its last client)."""
    with translated("closing the Chroma client"):
        client.close()  # type: ignore[attr-defined]  # on chromadb's Client, not on ClientAPI


def ephemeral() -> Connection:
    """A connection to an in-memory Chroma (which chromadb shares within the process)."""
    with translated("starting an in-memory Chroma"):
        client = chromadb.EphemeralClient(settings=client_settings())
    return Connection(client, threading.RLock(), None, lambda: close_client(client))


def http(host: str, port: int, ssl: bool, tenant: str, database: str) -> Connection:
    """A connection to a Chroma server.

    :raises StoreUnavailableError: if the server cannot be reached.
    """
    with translated(f"connecting to the Chroma server at {host}:{port}"):
        client = chromadb.HttpClient(
            host=host, port=port, ssl=ssl, tenant=tenant, database=database, settings=client_settings()
        )
    return Connection(client, threading.RLock(), None, lambda: close_client(client))
