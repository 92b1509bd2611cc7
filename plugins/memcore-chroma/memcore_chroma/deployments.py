"""The three Chroma stores: embedded (``chroma://``), in memory (``chroma+memory://``), server
(``chroma+http://``, ``chroma+https://``).

Each checks its arguments, connects (:mod:`memcore_chroma.connection`) and declares its
capabilities; everything else is :class:`~memcore_chroma.store.ChromaStoreBase`.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Self, TypeVar
from uuid import UUID, uuid4

from memcore.errors import InvalidInputError
from memcore.filters import Filter
from memcore.loop_bound import LoopBound
from memcore.queries import ListQuery, SearchQuery
from memcore.records import MemoryRecord, ScoredRecord
from memcore.scope import Scope
from memcore.sessions import OFFLOAD_AT, arun_session
from memcore.store import Capabilities
from memcore.urls import COLLECTION, StoreURL
from memcore.validation import Matrix, check_dimension
from memcore_chroma import connection, urls
from memcore_chroma.async_client import AsyncReader
from memcore_chroma.calls import Session, many_entries
from memcore_chroma.connection import Connection
from memcore_chroma.errors import ExclusiveMaintenanceError, translated
from memcore_chroma.opening import (
    DEFAULT_COLLECTION,
    META_INDEX_DIMENSION,
    check_collection_name,
    check_ef_search,
    ef_search_of,
    int_value,
    settled,
)
from memcore_chroma.store import ChromaStoreBase

__all__ = ["ChromaHttpStore", "ChromaMemoryStore", "ChromaStore"]

_inherited: list[Connection] = []
"""Server connections a forked child inherited: never used, closed or collected there."""
T = TypeVar("T")


def _connect(address: urls.ServerAddress) -> Connection:
    return connection.http(address.host, address.port, address.ssl, address.tenant, address.database)


class ChromaStore(ChromaStoreBase):
    """An embedded, durable Chroma store in a folder (``chroma:///path``).

    One process at a time: a second process gets
    :class:`~memcore.errors.StoreLockedError`. Stores of one process on one
    folder (other collections, or the same one) share a single client.

    :param path: the persist directory; created if missing.
    :param collection: the collection name (default ``memcore``).
    :param dimension: fix the vector dimension up front.
    :param ef_search: set the collection's HNSW ``ef_search`` (kept with the collection).
    """

    name: ClassVar[str] = "chroma"
    schemes: ClassVar[tuple[str, ...]] = ("chroma",)
    capabilities: ClassVar[Capabilities] = Capabilities(durable=True, ann=True, expiry=True)

    def __init__(
        self,
        path: str | Path,
        *,
        collection: str = DEFAULT_COLLECTION,
        dimension: int | None = None,
        ef_search: int | None = None,
    ) -> None:
        check_collection_name(collection)
        check_dimension(dimension)
        check_ef_search(ef_search)
        super().__init__(connection.persistent(Path(path)), collection, dimension, ef_search)

    url_params: ClassVar[frozenset[str]] = urls.EMBEDDED_PARAMS

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``chroma:///abs/path`` or ``chroma://rel/path`` (``?collection=``, ``?dimension=``,
        ``?ef_search=``)."""
        return cls(
            url.location(),
            collection=url.text_param(COLLECTION, DEFAULT_COLLECTION),
            dimension=urls.dimension_param(url),
            ef_search=urls.ef_search_param(url),
        )


class ChromaMemoryStore(ChromaStoreBase):
    """An in-memory Chroma store (``chroma+memory://``), lost when closed.

    chromadb shares one in-memory system per process, so each store gets a
    collection of its own (a random name), dropped by :meth:`close`.

    :param dimension: fix the vector dimension up front.
    """

    name: ClassVar[str] = "chroma-memory"
    schemes: ClassVar[tuple[str, ...]] = ("chroma+memory",)
    capabilities: ClassVar[Capabilities] = Capabilities(durable=False, ann=True, expiry=True)

    def __init__(self, *, dimension: int | None = None) -> None:
        check_dimension(dimension)
        super().__init__(connection.ephemeral(), f"memcore-{uuid4().hex}", dimension)

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``chroma+memory://`` (nothing may follow the scheme)."""
        url.require_empty_location()
        return cls()

    def _close(self) -> None:
        try:
            with translated("dropping the in-memory collection"), self._connection.reading():
                self._connection.client.delete_collection(self._name)
        finally:
            super()._close()


class ChromaHttpStore(ChromaStoreBase):
    """A store in a Chroma server (``chroma+http://host:port``, ``chroma+https://``).

    A server that is down or restarting raises
    :class:`~memcore.errors.StoreUnavailableError`; the next call after it is
    back succeeds.

    :param address: the server, tenant and database.
    :param collection: the collection name (default ``memcore``).
    :param dimension: fix the vector dimension up front.
    :param ef_search: set the collection's HNSW ``ef_search`` (kept with the collection; a running
        server applies a change to an existing collection when it next loads its index).
    :param exclusive: promise that this store is the collection's only client (no other
        process, host or client uses it): then ``purge()`` and the first vector after stand-ins
        of another size rebuild the collection, as :meth:`rebuild_exclusively` does, instead of
        raising :class:`~memcore_chroma.ExclusiveMaintenanceError`.
    """

    name: ClassVar[str] = "chroma-http"
    schemes: ClassVar[tuple[str, ...]] = ("chroma+http", "chroma+https")
    capabilities: ClassVar[Capabilities] = Capabilities(durable=True, ann=True, server=True, expiry=True)

    def __init__(
        self,
        address: urls.ServerAddress,
        *,
        collection: str = DEFAULT_COLLECTION,
        dimension: int | None = None,
        ef_search: int | None = None,
        exclusive: bool = False,
    ) -> None:
        check_collection_name(collection)
        check_dimension(dimension)
        check_ef_search(ef_search)
        if not isinstance(exclusive, bool):
            raise InvalidInputError(f"exclusive must be a bool, got {exclusive!r}")
        self._address = address
        self.rebuilds_safely = exclusive
        self._reader = LoopBound(lambda: AsyncReader(address, collection), AsyncReader.aclose)
        super().__init__(_connect(address), collection, dimension, ef_search)

    url_params: ClassVar[frozenset[str]] = urls.SERVER_PARAMS

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``chroma+http(s)://host:port``.

        Parameters: ``?collection=``, ``?dimension=``, ``?ef_search=``, ``?tenant=``, ``?database=``,
        ``?exclusive=``.
        """
        address, _ = urls.server_address(url)
        return cls(
            address,
            collection=url.text_param(COLLECTION, DEFAULT_COLLECTION),
            dimension=urls.dimension_param(url),
            ef_search=urls.ef_search_param(url),
            exclusive=url.flag("exclusive"),
        )

    def _reconnect_in_child(self) -> None:
        """In a forked child: a new client of the child's own, with fresh locks.

        The inherited client's HTTP connections are the parent's sockets: a request on them could
        read the parent's reply (another scope's records). It is dropped without being closed
        (closing would shut the parent's connections) and kept from the garbage collector.
        Each chromadb ``HttpClient`` has a system, and so an HTTP connection pool, of its own
        (chromadb keys HTTP systems by a random id, never by settings), so nothing is shared.
        """
        _inherited.append(self._connection)
        self._reader.forget_after_fork()
        self._connection = _connect(self._address)
        self._generation = -1  # fetch the collection handle anew, through the new client

    # -- the async API: chromadb's async client, on the first loop that calls ---------------------

    def _native_on_this_loop(self) -> bool:
        return not self._closed and self._reader.serves()

    def _async_reader(self) -> AsyncReader:
        reader = self._reader.client()
        if reader is None:
            raise self._closed_error()  # closed (or reset by a fork) since the call started
        return reader

    async def _read(self, session: Session[T]) -> T:
        return await arun_session(
            session, self._async_reader().make, self._worker_pool().run, heavy=many_entries
        )

    async def _write(self, session: Session[T]) -> T:
        """A write's session, under the async API's write lock.

        The sync API's writes hold the process's write lock (a thread lock, which a coroutine
        cannot hold across awaits), so a sync and an async write of one process are serialised no
        more than two processes' are: two versions of one record written at the same instant can
        leave a metadata key the newer one dropped (Chroma merges metadata on upsert), as between
        any two clients of a server.
        """
        reader = self._async_reader()
        async with reader.write_lock:
            return await arun_session(session, reader.make, self._worker_pool().run, heavy=many_entries)

    async def _areplace(self, old: MemoryRecord, new: MemoryRecord, vector: Matrix | None) -> bool:
        """:meth:`_replace` under the async API's write lock, which its writes and deletes take: on
        this loop, another write lands before the check or after the write. Once the dimension is
        settled the check and the write are one session on the async client; before, the sync
        :meth:`_replace` runs on the workers (it may write collection metadata, or rebuild), the
        lock still held."""
        reader = self._async_reader()
        async with reader.write_lock:
            if not settled(self._meta):
                return await self._worker_pool().run(self._replace, old, new, vector)
            session = self._replace_session(old, new, vector, self._meta)
            written, _ = await arun_session(session, reader.make, self._worker_pool().run, heavy=many_entries)
            return written

    async def _ascopes(self, prefix: Scope) -> list[tuple[Scope, int]]:
        return await self._read(self._scopes_session(prefix))

    async def _aadd(self, records: list[MemoryRecord], vectors: Matrix | None) -> None:
        if len(records) >= OFFLOAD_AT or not settled(self._meta):
            # Encoding a large batch is CPU work; an unsettled dimension may need metadata
            # written, or a rebuild: both on the workers, through the sync client.
            await self._worker_pool().run(self._add, records, vectors)
            return
        await self._write(self._add_session(records, vectors, self._meta))

    async def _adelete(self, scope: Scope, ids: list[UUID]) -> int:
        return await self._write(self._delete_session(scope, ids))

    async def _adelete_where(self, scope: Scope, node: Filter | None) -> int:
        return await self._write(self._delete_where_session(scope, node))

    async def _aget(self, scope: Scope, ids: list[UUID]) -> list[MemoryRecord]:
        return await self._read(self._get_session(scope, ids))

    async def _avectors(self, scope: Scope, ids: list[UUID]) -> list[tuple[UUID, Matrix]]:
        return await self._read(self._vectors_session(scope, ids))

    async def _alist(self, scope: Scope, query: ListQuery) -> list[MemoryRecord]:
        return await self._read(self._list_session(scope, query))

    async def _acount(self, scope: Scope, node: Filter | None) -> int:
        return await self._read(self._count_session(scope, node))

    async def _asearch(self, scope: Scope, request: SearchQuery) -> list[ScoredRecord]:
        if request.vector is not None and int_value(self._meta, META_INDEX_DIMENSION) not in (
            None,
            request.vector.shape[1],
        ):
            # Only stand-ins indexed so far, in another size: reading the metadata anew is sync.
            return await self._worker_pool().run(self._search, scope, request)
        # The handle as last fetched: a server applies a changed ef_search only once it restarts.
        return await self._read(self._search_session(scope, request, ef_search_of(self._collection)))

    def _close(self) -> None:
        self._reader.close()
        super()._close()

    def _purge(self) -> None:
        """Refused: on a server, a rebuild would lose other clients' concurrent writes.

        ``purge()`` has deleted the expired records by then (``sweep()``: deletes, which are safe
        on a server); erasing what deletes leave is what is refused. Run
        :meth:`rebuild_exclusively` during maintenance instead, and the server's ``chroma vacuum``
        to compact its SQLite file.

        With ``exclusive=True`` (``?exclusive=true``: this store is the collection's only
        client), it is :meth:`rebuild_exclusively`.

        :raises ExclusiveMaintenanceError: unless the store was opened exclusive.
        """
        self._check_open()
        if self.rebuilds_safely:
            self.rebuild_exclusively()
            return
        raise ExclusiveMaintenanceError(
            f"purge() rebuilds the Chroma collection {self._name!r}, which on a server loses what other "
            "clients write meanwhile; during maintenance (no other client using the collection) call "
            "ChromaHttpStore.rebuild_exclusively() instead, then `chroma vacuum` on the server"
        )

    def rebuild_exclusively(self, dimension: int | None = None) -> None:
        """Rebuild the collection without its deleted records: the server form of :meth:`purge`.

        Only while no other client (process, host, or store object on another
        client) uses the collection: what they write during the rebuild is
        lost, and their handles move to the new collection on their next call.

        :param dimension: the vector dimension to resize the stand-in vectors of
            records without one to (needed when they were written before the
            dimension was known and vectors of another size are to come);
            defaults to the store's dimension, if known.
        :raises DimensionMismatchError: if the store holds vectors of another dimension.
        """
        self._check_open()
        check_dimension(dimension)
        with self._connection.write_lock:
            self._check_open()
            self._rebuild_collection(dimension)
