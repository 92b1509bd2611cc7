"""A store's connections: a psycopg pool for blocking calls, a pool of its own for the event loop.

The blocking pool (``psycopg_pool.ConnectionPool``) serves the sync API and the store's worker
threads. The async API's statements run on :class:`LoopPool`: psycopg ``AsyncConnection`` objects
belonging to one event loop, the first loop that calls the store (:meth:`Connections.serves`).
Calls from another loop while that one lives run on the workers and the blocking pool, with the
same results; once the first loop is closed, the next loop gets a pool of its own. Each pool holds
at most :data:`POOL_SIZE` connections.

Why not ``psycopg_pool.AsyncConnectionPool``: its maintenance tasks catch ``CancelledError``
(``CLIENT_EXCEPTIONS`` in psycopg_pool 3.3), so an ``asyncio.run()`` that ends while a store is
still open can cancel one mid-task and then wait for it forever (this suite met it: the hang was
in ``asyncio.runners._cancel_all_tasks``). :class:`LoopPool` has no background task at all.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from pgvector.psycopg import register_vector, register_vector_async
from psycopg import pq
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from memcore.errors import StoreClosedError, StoreError
from memcore.loop_bound import LoopBound
from memcore_pgvector.errors import translated

POOL_SIZE = 8
"""Connections each pool keeps at most (calls beyond it wait for one)."""
CONNECT_TIMEOUT = 10.0
"""Seconds to wait for the server when the store opens."""
CONNECT_SECONDS = int(CONNECT_TIMEOUT)
WAIT_TIMEOUT = 5.0
"""Seconds a call waits for a connection (all busy, or the server away) before StoreUnavailableError."""
SEARCH_SETTINGS = "SET hnsw.iterative_scan = relaxed_order; SET hnsw.ef_search = 100"
"""Every connection's HNSW settings: an iterative scan goes on until a scoped or filtered query has
its ``limit`` hits (up to ``hnsw.max_scan_tuples``), each step exploring 100 candidates."""

_inherited_pools: list[object] = []
"""Blocking pools a forked child inherited from its parent: kept referenced and never touched, so
that nothing of them (no ``close()``, no libpq ``Terminate`` on the parent's sockets) ever runs
here; psycopg's ``PGconn`` only calls ``PQfinish`` in the process that connected."""


def _configure(connection: psycopg.Connection[Any]) -> None:
    register_vector(connection)
    connection.execute(SEARCH_SETTINGS)


async def _aconfigure(connection: psycopg.AsyncConnection[Any]) -> None:
    await register_vector_async(connection)
    await connection.execute(SEARCH_SETTINGS)


class Connections:
    """The pools of one store (see the module's docstring); safe to share between threads.

    :param closed_error: the error for a call that meets a pool closed under it.
    """

    def __init__(self, conninfo: str, location: str, closed_error: Callable[[], StoreClosedError]) -> None:
        self._conninfo, self.location, self._closed_error = conninfo, location, closed_error
        self._pool = self._open_pool()
        self._loop_pool = LoopBound(lambda: LoopPool(conninfo), _aclose, LoopPool.close)

    def _open_pool(self) -> ConnectionPool[Any]:
        pool: ConnectionPool[Any] = ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=POOL_SIZE,
            kwargs={"autocommit": True},  # one round trip a read; writes open a transaction
            configure=_configure,
            timeout=WAIT_TIMEOUT,
            open=False,
        )
        try:
            pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except BaseException:
            pool.close()
            raise
        return pool

    @contextmanager
    def connection(self, action: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit), errors translated. A connection the server dropped is
        replaced by the pool when it comes back: the call that met it raises StoreUnavailableError."""
        with (
            self._translated(action),
            self._pool.connection() as connection,
            self._refusals(connection, action),
        ):
            yield connection

    def serves(self) -> bool:
        """Whether the running event loop's calls get native async connections (:meth:`aconnection`):
        see :meth:`memcore.loop_bound.LoopBound.serves`."""
        return self._loop_pool.serves()

    @asynccontextmanager
    async def aconnection(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """:meth:`connection` for a loop :meth:`serves`: a connection of the async pool."""
        pool = self._loop_pool.client()
        if pool is None:
            raise self._closed_error()  # closed (or reset by a fork) since the call started
        with self._translated(action):
            async with pool.connection() as connection:
                with self._refusals(connection, action):
                    yield connection

    @contextmanager
    def _translated(self, action: str) -> Iterator[None]:
        """Errors as memcore's; a pool closed under the call as the store's closed error."""
        with translated(action, self.location):
            try:
                yield
            except PoolClosed:
                raise self._closed_error() from None

    @contextmanager
    def _refusals(self, connection: psycopg.BaseConnection[Any], action: str) -> Iterator[None]:
        """A statement libpq refused on a connection that is fine (more than 65,535 parameters...)
        as StoreError: retrying cannot help, so it is not unavailability."""
        try:
            yield
        except psycopg.OperationalError as exc:
            if exc.sqlstate is None and not connection.broken:
                raise StoreError(
                    f"PostgreSQL at {self.location} refused a statement while {action}: {exc}"
                ) from exc
            raise

    def reconnect_in_child(self) -> None:
        """In a forked child: a new blocking pool, and no async pool until a loop asks; the
        inherited pools are dropped without being closed (their sockets are the parent's
        sessions: using one would interleave two processes' replies, closing one would send
        ``Terminate`` and end the parent's session)."""
        self._pool._closed = True  # its __del__ would signal worker threads that live in the parent
        _inherited_pools.append(self._pool)
        self._loop_pool.forget_after_fork()
        with translated("reconnect in a forked process", self.location):
            self._pool = self._open_pool()

    def close(self) -> None:
        """Close both pools (from any thread)."""
        self._pool.close()
        self._loop_pool.close()


async def _aclose(pool: LoopPool) -> None:
    pool.close()


class LoopPool:
    """At most :data:`POOL_SIZE` ``AsyncConnection`` objects for the event loop that made it (see
    the module's docstring): opened when a call needs one, kept while idle, closed when returned
    in any state but idle (a call cancelled mid-statement that psycopg could not bring back)."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._slots = asyncio.Semaphore(POOL_SIZE)
        self._idle: deque[psycopg.AsyncConnection[Any]] = deque()
        self._closed = False
        self.opened = 0
        """Connections opened so far (for tests and benchmarks)."""
        self.requests = 0
        """Connections handed out so far."""

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection for one call, waiting up to :data:`WAIT_TIMEOUT` seconds for a free slot.

        :raises PoolClosed: once the pool is closed. :raises PoolTimeout: when no slot frees in time.
        """
        if self._closed:
            raise PoolClosed("the pool is closed")
        try:
            async with asyncio.timeout(WAIT_TIMEOUT):
                await self._slots.acquire()
        except TimeoutError:
            raise PoolTimeout(f"no connection free after {WAIT_TIMEOUT} s") from None
        try:
            connection = await self._take()
            self.requests += 1
            try:
                yield connection
            finally:
                await self._give_back(connection)
        finally:
            self._slots.release()

    async def _take(self) -> psycopg.AsyncConnection[Any]:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
        if self._closed:
            raise PoolClosed("the pool is closed")
        connection = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, connect_timeout=CONNECT_SECONDS
        )
        try:
            await _aconfigure(connection)
        except BaseException:
            await connection.close()
            raise
        self.opened += 1
        return connection

    async def _give_back(self, connection: psycopg.AsyncConnection[Any]) -> None:
        if (
            self._closed
            or connection.broken
            or connection.info.transaction_status != pq.TransactionStatus.IDLE
        ):
            await connection.close()
        elif not connection.closed:
            self._idle.append(connection)

    def close(self) -> None:
        """Close the idle connections now and the busy ones when their calls return them. Safe from
        any thread, its loop running or gone: closing a connection is ``PQfinish``, which waits for
        nothing."""
        self._closed = True
        while self._idle:
            self._idle.pop().pgconn.finish()
