"""Opening an engine for each kind of location, with the lock its calls run under.

* :func:`connect_edge`: an embedded, durable Qdrant Edge shard in a folder (``qdrant:///path``);
* :func:`connect_memory`: a Qdrant Edge shard in a private temporary folder, removed on close
  (``qdrant+memory://``), in :func:`tempfile.gettempdir` (``$TMPDIR``);
* :func:`connect_server`: a collection on a Qdrant server (``qdrant+http(s)://host:port[?collection=name]``);
* :func:`connect_local_client`: qdrant-client's local mode in a folder, for benchmarks only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qdrant_client import AsyncQdrantClient, QdrantClient

from memcore.errors import InvalidInputError
from memcore_qdrant import embedded
from memcore_qdrant.client_engine import ClientEngine, check_server_version
from memcore_qdrant.edge_engine import EdgeEngine
from memcore_qdrant.engine import Engine
from memcore_qdrant.errors import translated

API_KEY_ENV = "QDRANT_API_KEY"
DEFAULT_COLLECTION = "memcore"
SERVER_TIMEOUT_SECONDS = 10
_COLLECTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,255}")


@dataclass(frozen=True)
class Connection:
    """An open engine, the lock that serialises its calls, and how to let go of it.

    ``reconnect``, for a server only, gives the engine connections of its own in a
    process forked from the opener's (:meth:`memcore.store.BaseStore._reconnect_in_child`);
    embedded engines have none, so their stores refuse in a forked child. ``new_async_client``,
    for a server only, makes the ``AsyncQdrantClient`` (or a client with its interface) the store's
    async API awaits on the loop (:mod:`memcore_qdrant.calls`); embedded engines run the async
    API on the store's workers.
    """

    engine: Engine
    lock: Any
    release: Callable[[], None]
    reconnect: Callable[[], None] | None = None
    new_async_client: Callable[[], Any] | None = None


def connect_edge(path: str | os.PathLike[str]) -> Connection:
    """The embedded Qdrant Edge store in ``path``, shared by every store object of this process."""
    opened = embedded.acquire(Path(path), "qdrant-edge", _open_edge)
    return Connection(opened.engine.engine, opened.engine.lock, lambda: embedded.release(opened))


def _open_edge(root: Path) -> Engine:
    with translated("open the shard", str(root)):
        return EdgeEngine(root)


MEMORY_PREFIX = "memcore-qdrant-"
OWNER_FILE = ".owner"
"""In each ``qdrant+memory://`` folder: a file its owner holds an exclusive ``flock`` on while it lives."""

_owner_fds: set[int] = set()


def _close_owner_fds_after_fork() -> None:
    """In a forked child: the folders are the parent's (its own descriptors keep them locked)."""
    for fd in _owner_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    _owner_fds.clear()


os.register_at_fork(after_in_child=_close_owner_fds_after_fork)


def connect_memory() -> Connection:
    """A throwaway Qdrant Edge shard in a private temporary folder, deleted on release.

    The folder is made in :func:`tempfile.gettempdir` (``$TMPDIR``, usually ``/tmp``),
    not in ``/dev/shm``: a shard's files are memory-mapped, and a full ``/dev/shm``
    (64 MB by default in a Docker container) kills the process with ``SIGBUS``
    instead of raising an error. Set ``TMPDIR`` to a RAM-backed folder of ample size
    to keep the shard in RAM.

    A process killed with the store open cannot delete its folder; the next
    ``qdrant+memory://`` opened in the same temporary directory does (:func:`sweep_stale_folders`).
    """
    with translated("create a temporary folder", tempfile.gettempdir()):
        sweep_stale_folders(Path(tempfile.gettempdir()))
        root = Path(tempfile.mkdtemp(prefix=MEMORY_PREFIX))
        try:
            owner = _hold(root)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
    try:
        engine = _open_edge(root)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        _let_go(owner)
        raise
    lock = embedded.ProcessLock()
    # A store never closed still leaves no folder behind once the interpreter exits.
    remove = weakref.finalize(engine, _remove_folder, root, lock.pid, owner)

    def release() -> None:
        if not lock.owned():
            return  # a forked child: the shard and its folder are the parent's
        try:
            with lock:
                engine.close()
        finally:
            remove()

    return Connection(engine, lock, release)


def _hold(root: Path) -> int:
    """Lock ``root``'s owner file for as long as this process lives (or until released).

    The file is locked under another name and renamed into place, so that an owner file a
    sweeper finds is always locked already, unless its owner is gone.
    """
    claiming = root / f"{OWNER_FILE}.{os.getpid()}"
    fd = os.open(claiming, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(claiming, root / OWNER_FILE)
    except BaseException:
        os.close(fd)
        raise
    _owner_fds.add(fd)
    return fd


def _let_go(fd: int) -> None:
    if fd in _owner_fds:
        _owner_fds.discard(fd)
        os.close(fd)


def sweep_stale_folders(parent: Path) -> list[Path]:
    """Delete the ``qdrant+memory://`` folders under ``parent`` whose owner died (``kill -9``, a crash).

    A folder is stale when its owner file's lock can be taken: the kernel drops a lock with its
    holder, and a live owner holds it from before the file has its name. Folders without an
    owner file (being created this instant, or made before owner files existed) and folders of
    other users are left alone.

    :returns: the folders deleted.
    """
    swept: list[Path] = []
    uid = os.getuid()
    try:
        candidates = [entry for entry in os.scandir(parent) if entry.name.startswith(MEMORY_PREFIX)]
    except OSError:
        return swept
    for entry in candidates:
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            fd = os.open(Path(entry.path, OWNER_FILE), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # no owner file, or gone meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # its owner is alive
        try:
            shutil.rmtree(entry.path, ignore_errors=True)
            swept.append(Path(entry.path))
        finally:
            os.close(fd)
    return swept


def _remove_folder(root: Path, owner: int, fd: int) -> None:
    if os.getpid() == owner:  # never from a forked child
        try:
            shutil.rmtree(root, ignore_errors=True)
        finally:
            _let_go(fd)


def connect_local_client(path: str | os.PathLike[str]) -> Connection:
    """qdrant-client's local mode in ``path``: filters run in Python, point by point.

    Not used by any URL; ``benchmarks/qdrant_embedded.py`` compares it with Qdrant Edge.
    """
    opened = embedded.acquire(Path(path), "qdrant-client-local", _open_local_client)
    return Connection(opened.engine.engine, opened.engine.lock, lambda: embedded.release(opened))


def _open_local_client(root: Path) -> Engine:
    with translated("open the local collection", str(root)):
        client = QdrantClient(path=str(root / "client"))
        try:
            return ClientEngine(client, DEFAULT_COLLECTION, str(root), server=False)
        except BaseException:
            client.close()
            raise


def connect_server(base_url: str, collection: str, api_key: str | None = None) -> Connection:
    """A collection on a Qdrant server, created (with its payload indexes) if missing.

    :param base_url: ``http://host:port`` or ``https://host:port``.
    :param collection: the collection's name.
    :param api_key: the server's API key; default ``$QDRANT_API_KEY``.
    :raises StoreUnavailableError: if the server cannot be reached.
    :raises IncompatibleServerError: if the server is older than
        :data:`~memcore_qdrant.client_engine.MIN_SERVER_VERSION`.
    """
    if not _COLLECTION_NAME.fullmatch(collection):
        raise InvalidInputError(
            f"invalid Qdrant collection name {collection!r}: use letters, digits, _ and -"
        )
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None
    location = f"{base_url}/{collection}"

    def new_client() -> QdrantClient:
        # check_server_version replaces qdrant-client's own check, which only warns, from a thread.
        return QdrantClient(
            url=base_url, api_key=key, timeout=SERVER_TIMEOUT_SECONDS, check_compatibility=False
        )

    def new_async_client() -> AsyncQdrantClient:
        return AsyncQdrantClient(
            url=base_url, api_key=key, timeout=SERVER_TIMEOUT_SECONDS, check_compatibility=False
        )

    with translated("connect", location):
        client = new_client()
        try:
            check_server_version(client, location)
            engine = ClientEngine(client, collection, location, server=True)
        except BaseException:
            client.close()
            raise
    return server_connection(engine, new_client, new_async_client)


def server_connection(
    engine: ClientEngine, new_client: Callable[[], QdrantClient], new_async_client: Callable[[], Any]
) -> Connection:
    """The connection of a server store: in a forked child, ``new_client()`` replaces the inherited
    client (whose sockets are the parent's too), which is dropped unclosed; ``new_async_client()``
    makes the async API's client on the first loop that calls."""
    return Connection(
        engine,
        threading.RLock(),
        engine.close,
        reconnect=lambda: engine.replace_client(new_client()),
        new_async_client=new_async_client,
    )
