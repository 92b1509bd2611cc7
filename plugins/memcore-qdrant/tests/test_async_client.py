"""The server path's async API: ClientEngine's sessions of client calls, awaited on the loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from async_clients import ThreadedAsyncClient, native_local_store
from memcore_qdrant import QdrantServerStore
from memcore_qdrant.client_engine import ClientEngine
from memcore_qdrant.connections import Connection
from qdrant_client import AsyncQdrantClient, QdrantClient

from memcore.records import MemoryRecord, Message
from memcore.scope import Scope

ALICE = Scope(tenant="acme", user_id="alice")


def _records(count: int) -> list[MemoryRecord]:
    return [
        MemoryRecord(scope=ALICE, message=Message(role="user", content=f"alice likes tea number {i}"))
        for i in range(count)
    ]


def _vectors(count: int) -> list[list[float]]:
    return [[1.0, float(i % 7), float(i % 3) + 0.5] for i in range(count)]


def test_the_calls_fit_async_qdrant_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real ``AsyncQdrantClient`` (local mode, sharing the sync client's collections: one
    collection for both) answers every hook of a server store's async API as the sync API does."""
    client, async_client = QdrantClient(":memory:"), AsyncQdrantClient(":memory:")
    engine = ClientEngine(client, "memcore", "http://server:6333/memcore", server=False)
    async_client._client.collections = client._client.collections
    store = QdrantServerStore(
        Connection(engine, threading.RLock(), client.close, new_async_client=lambda: async_client)
    )
    records, vectors = _records(10), _vectors(10)
    store.add(records[:1], vectors[:1])  # the first vector types the collection (a sync call)
    sync_calls: list[str] = []
    make = engine._make
    monkeypatch.setattr(engine, "_make", lambda call: (sync_calls.append(call.method), make(call))[1])

    asyncio.run(store.aadd(records[1:], vectors[1:]))
    query = [1.0, 2.0, 0.5]
    expected = (store.list(ALICE, limit=5, order="desc"), store.search(ALICE, vector=query, limit=3))
    sync_calls.clear()  # the sync references' own

    async def read() -> tuple[Any, ...]:
        listed = await store.alist(ALICE, limit=5, order="desc")
        return (
            listed,
            await store.aget(ALICE, [r.id for r in listed]),
            await store.asearch(ALICE, vector=query, limit=3),
            await store.asearch(ALICE, keywords="tea number 4", limit=3),
            await store.asearch(ALICE, text="NUMBER 7"),
            await store.avectors(ALICE, [records[2].id]),
            await store.acount(ALICE, filter={"role": "user"}),
        )

    async def change() -> tuple[Any, ...]:
        updated = await store.aupdate(ALICE, records[3].id, content="alice likes coffee", metadata={"n": 1})
        return updated, await store.ascopes(Scope(tenant="acme"))

    async def delete() -> tuple[int, ...]:
        deleted = await store.adelete(ALICE, [records[0].id])
        latest = {"created_at": {"$gte": records[8].created_at.isoformat()}}
        return deleted, await store.adelete_where(ALICE, latest), await store.acount(ALICE)

    listed, got, hits, ranked, texts, vectors_back, counted = asyncio.run(read())
    assert (listed, got) == (expected[0], expected[0])
    assert [h.record.id for h in hits] == [h.record.id for h in expected[1]]
    assert ranked and ranked[0].record.id == records[4].id
    assert [h.record.id for h in texts] == [records[7].id]
    assert list(vectors_back) == [records[2].id]
    assert counted == 10
    updated, scopes = asyncio.run(change())  # a conditional upsert, a facet
    assert (updated.message.content, updated.metadata) == ("alice likes coffee", {"n": 1})
    assert [(entry.scope, entry.count) for entry in scopes] == [(ALICE.exact(), 10)]
    assert asyncio.run(delete()) == (1, 2, 7)
    assert sync_calls == []  # every call of every turn went through the async client
    assert store.get(ALICE, [records[3].id]) == [updated]
    store.close()


def test_a_second_loop_uses_the_workers_and_closing_closes_the_loops_client(tmp_path: Path) -> None:
    store = native_local_store(tmp_path / "local")
    store.add(_records(3), _vectors(3))
    first = asyncio.new_event_loop()
    running = threading.Thread(target=first.run_forever, daemon=True)
    running.start()
    try:
        assert asyncio.run_coroutine_threadsafe(store.acount(ALICE), first).result(timeout=30) == 3
        bounded = store._async_client._client if store._async_client else None
        bound = None if bounded is None else bounded.client
        assert isinstance(bound, ThreadedAsyncClient) and bound.calls == ["count"]
        assert asyncio.run(store.acount(ALICE)) == 3  # another loop: on the workers
        assert bound.calls == ["count"]
        store.close()  # from this thread: the client is closed on its loop
        assert store._async_client is not None and store._async_client.client() is None
    finally:
        first.call_soon_threadsafe(first.stop)
        running.join(timeout=30)
        first.close()
