"""The async API's own connections: a pool of AsyncConnection objects on the loop that first calls.

Each store here connects with an ``application_name`` of its own, so that the server's
``pg_stat_activity`` shows exactly its connections.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from conftest import Postgres, with_table
from memcore_pgvector import PgvectorStore
from memcore_pgvector.connections import POOL_SIZE, LoopPool

from memcore.errors import StoreError, StoreUnavailableError
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope

ALICE, BOB = Scope(tenant="acme", user_id="alice"), Scope(tenant="globex", user_id="bob")


@pytest.fixture
def app() -> str:
    return f"memcore-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(postgres: Postgres, table_name: str, app: str) -> Iterator[PgvectorStore]:
    opened = PgvectorStore.from_url(f"{with_table(postgres.uri, table_name)}&application_name={app}")
    yield opened
    opened.close()


def _records(count: int, scope: Scope, name: str) -> list[MemoryRecord]:
    return [
        MemoryRecord(scope=scope, message=Message(role="user", content=f"{name} {i}")) for i in range(count)
    ]


def _vectors(count: int, seed: int = 0) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).standard_normal((count, 8)).astype(np.float32)


def _states(postgres: Postgres, app: str) -> list[str | None]:
    """The state of every server connection of ``app`` (from another connection)."""
    with psycopg.connect(postgres.uri, autocommit=True) as connection:
        rows = connection.execute("SELECT state FROM pg_stat_activity WHERE application_name = %s", [app])
        return [row[0] for row in rows]


def _requests(pool: Any) -> int:
    """Connections handed out by a blocking pool (psycopg_pool's statistics) or a loop's pool."""
    return pool.requests if isinstance(pool, LoopPool) else int(pool.get_stats().get("requests_num", 0))


def test_async_calls_run_on_the_loop_pool_within_its_size(
    store: PgvectorStore, postgres: Postgres, app: str
) -> None:
    store.add(_records(30, ALICE, "alice"), _vectors(30))
    blocking = _requests(store._connections._pool)
    query = _vectors(1, seed=1)[0]

    async def agent() -> None:
        for _ in range(3):
            hits = await store.asearch(ALICE, vector=query, limit=5)
            assert [h.record.id for h in hits] == [
                h.record.id for h in store.search(ALICE, vector=query, limit=5)
            ]
            listed = await store.alist(ALICE, limit=10)
            assert await store.aget(ALICE, [r.id for r in listed]) == listed
            assert await store.acount(ALICE) == 30

    async def main() -> list[str | None]:
        await asyncio.gather(*(agent() for _ in range(64)))
        return _states(postgres, app)

    blocking_searches = 64 * 3  # the sync reference searches above
    states = asyncio.run(main())
    apool = store._connections._loop_pool._client
    assert apool is not None and _requests(apool) >= 64 * 3 * 4
    assert _requests(store._connections._pool) == blocking + blocking_searches  # only the references
    assert apool.opened <= POOL_SIZE
    assert len(states) <= POOL_SIZE + 1  # the loop's pool, and the blocking pool's one idle connection


def test_a_second_loop_uses_the_workers_until_the_first_is_gone(store: PgvectorStore) -> None:
    store.add(_records(5, ALICE, "alice"))
    first = asyncio.new_event_loop()
    running = threading.Thread(target=first.run_forever, daemon=True)
    running.start()
    try:
        assert asyncio.run_coroutine_threadsafe(store.acount(ALICE), first).result(timeout=30) == 5
        apool = store._connections._loop_pool._client
        assert apool is not None
        native, blocking = _requests(apool), _requests(store._connections._pool)
        assert asyncio.run(store.acount(ALICE)) == 5  # another loop: on the workers
        assert (_requests(apool), _requests(store._connections._pool)) == (native, blocking + 1)
    finally:
        first.call_soon_threadsafe(first.stop)
        running.join(timeout=30)
        first.close()
    assert asyncio.run(store.acount(ALICE)) == 5  # the first loop is gone: this one gets a pool
    assert store._connections._loop_pool._client is not apool


def test_cancelled_reads_leave_no_busy_connection(store: PgvectorStore, postgres: Postgres, app: str) -> None:
    store.add(_records(200, ALICE, "alice"), _vectors(200))
    queries = _vectors(40, seed=2)

    async def main() -> int:
        for delay in (0.0, 0.001, 0.003, 0.01):
            reads = [asyncio.create_task(store.asearch(ALICE, vector=query, limit=50)) for query in queries]
            await asyncio.sleep(delay)
            for read in reads:
                read.cancel()
            await asyncio.gather(*reads, return_exceptions=True)
        return await store.acount(ALICE)

    assert asyncio.run(main()) == 200
    deadline = time.monotonic() + 10
    while (
        busy := [s for s in _states(postgres, app) if s not in ("idle", None)]
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert busy == []
    assert len(_states(postgres, app)) <= POOL_SIZE + 1


def test_aclose_lets_a_native_write_already_started_land(postgres: Postgres, table_name: str) -> None:
    url = with_table(postgres.uri, table_name)
    batch = _records(100, ALICE, "alice")

    async def main() -> None:
        store = PgvectorStore.from_url(url)
        await store.acount(ALICE)  # the loop's pool is open
        writing = asyncio.create_task(store.aadd(batch, _vectors(100)))
        await asyncio.sleep(0)
        await store.aclose()
        await writing  # acknowledged: it must be there after reopening

    asyncio.run(main())
    with PgvectorStore.from_url(url) as reopened:
        assert reopened.count(ALICE) == 100


def test_statements_the_server_cannot_run_are_not_unavailable_on_the_loop(store: PgvectorStore) -> None:
    async def main() -> None:
        assert store._connections.serves()
        with pytest.raises(StoreError) as raised:
            async with store._connections.aconnection("test") as connection:
                await connection.execute("SELECT array_fill(1, ARRAY[200000000])")  # 54000: over a limit
        assert not isinstance(raised.value, StoreUnavailableError)
        assert await store.acount(ALICE) == 0  # and the pool is fine

    asyncio.run(main())


def test_a_forked_child_gets_pools_of_its_own_for_the_async_api(store: PgvectorStore) -> None:
    """The parent's loop pool is busy on a thread when the process forks; each side then reads
    only its own scope through the async API, and the parent's sessions survive the child's close."""
    store.add(_records(20, ALICE, "alice") + _records(20, BOB, "bob"))
    loop = asyncio.new_event_loop()
    running = threading.Thread(target=loop.run_forever, daemon=True)
    running.start()
    try:
        assert asyncio.run_coroutine_threadsafe(store.acount(ALICE), loop).result(timeout=30) == 20
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe and never returns
            status = 1
            try:
                figures = asyncio.run(_alist_loop(store, BOB, "bob", seconds=1.5))
                store.close()
                os.write(write_end, json.dumps(figures).encode())
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        own = asyncio.run_coroutine_threadsafe(_alist_loop(store, ALICE, "alice", seconds=1.5), loop).result()
        with os.fdopen(read_end) as pipe:
            report = pipe.read()
        _, status = os.waitpid(child, 0)
        assert status == 0 and report, "the child crashed"
        for side in (own, json.loads(report)):
            assert side["reads"] > 0 and side["foreign"] == side["failed"] == 0, side
        assert asyncio.run_coroutine_threadsafe(store.acount(BOB), loop).result(timeout=30) == 20
    finally:
        loop.call_soon_threadsafe(loop.stop)
        running.join(timeout=30)
        loop.close()


async def _alist_loop(store: PgvectorStore, scope: Scope, name: str, seconds: float) -> dict[str, int]:
    figures = {"reads": 0, "foreign": 0, "failed": 0}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            rows = await store.alist(scope, limit=20)
        except Exception:
            figures["failed"] += 1
            break
        figures["reads"] += 1
        figures["foreign"] += sum(not r.message.content.startswith(f"{name} ") for r in rows) + int(
            len(rows) != 20
        )
    return figures


def test_a_sync_close_during_a_native_write_acknowledges_the_write_that_landed(
    postgres: Postgres, table_name: str
) -> None:
    """``close()`` (a ``with store:`` ending, another thread) while a native write waits on a lock:
    the write commits once the lock is released, and its caller is told so, not StoreClosedError."""
    url = with_table(postgres.uri, table_name)
    store = PgvectorStore.from_url(url)
    batch = _records(2, ALICE, "alice")
    store.add(_records(1, BOB, "bob"), _vectors(1))  # the column is typed: the write is one upsert

    async def main() -> None:
        await store.acount(ALICE)  # the loop's pool is open
        with psycopg.connect(postgres.uri, autocommit=True) as blocker, blocker.transaction():
            blocker.execute(f"LOCK TABLE {table_name} IN EXCLUSIVE MODE")
            writing = asyncio.create_task(store.aadd(batch, _vectors(2)))
            await asyncio.sleep(0.3)  # the upsert waits for the lock
            await asyncio.to_thread(store.close)
        await writing  # committed when the lock went: acknowledged

    asyncio.run(main())
    with PgvectorStore.from_url(url) as reopened:
        assert reopened.count(ALICE) == 2
