"""The async API of a Chroma server store: reads through chromadb's async client, on the first loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from chroma_server import ChromaServer
from conftest import drop_collection
from memcore_chroma import ChromaHttpStore, connection, urls
from memcore_chroma.async_client import AsyncReader
from memcore_chroma.calls import CollectionCall

from memcore.errors import StoreClosedError
from memcore.scope import Scope
from memcore.testing.helpers import make_record, random_vectors

SCOPE = Scope(tenant="acme", user_id="alice")


@pytest.fixture
def address(chroma_server: ChromaServer) -> urls.ServerAddress:
    return urls.ServerAddress("127.0.0.1", chroma_server.port, ssl=False)


@pytest.fixture
def store(address: urls.ServerAddress, collection_name: str) -> Iterator[ChromaHttpStore]:
    opened = ChromaHttpStore(address, collection=collection_name)
    yield opened
    opened.close()
    drop_collection(
        connection.http(address.host, address.port, False, address.tenant, address.database), collection_name
    )


def _sync_calls(store: ChromaHttpStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The calls the store makes through the sync client from now on."""
    made: list[str] = []
    sync_make = store._make

    def spy(call: Any) -> Any:
        made.append(call.method)
        return sync_make(call)

    monkeypatch.setattr(store, "_make", spy)
    return made


def test_async_reads_go_through_the_async_client(
    store: ChromaHttpStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [make_record(SCOPE, f"turn {i}", minute=i) for i in range(100)]
    store.add(records, random_vectors(100))
    query = random_vectors(1, seed=5)[0]
    expected = (store.list(SCOPE, limit=10), store.search(SCOPE, vector=query, limit=5), store.count(SCOPE))
    made = _sync_calls(store, monkeypatch)

    async def main() -> tuple[Any, ...]:
        listed = await store.alist(SCOPE, limit=10)
        hits = await store.asearch(SCOPE, vector=query, limit=5)
        assert await store.aget(SCOPE, [r.id for r in listed]) == listed
        assert len(await store.alist(SCOPE)) == 100  # decoded on a worker: 100 entries
        return listed, hits, await store.acount(SCOPE)

    listed, hits, count = asyncio.run(main())
    assert (listed, [h.record.id for h in hits], count) == (
        expected[0],
        [h.record.id for h in expected[1]],
        expected[2],
    )
    replaced = records[0].model_copy(update={"metadata": {"topic": "tea"}})

    async def write() -> tuple[int, int, int]:
        await store.aadd([replaced, make_record(SCOPE, "new turn")], random_vectors(2, seed=9))
        tea = await store.acount(SCOPE, filter={"metadata.topic": "tea"})
        deleted = await store.adelete(SCOPE, [records[1].id])
        return tea, deleted, await store.adelete_where(SCOPE, {"metadata.topic": "tea"})

    assert asyncio.run(write()) == (1, 1, 1)
    assert made == []
    assert store.count(SCOPE) == 99


def test_one_store_closing_leaves_another_stores_reads_alone(
    store: ChromaHttpStore, address: urls.ServerAddress, collection_name: str
) -> None:
    """chromadb's async clients share their HTTP clients process-wide and close them all on any
    one's cleanup; each store's are its own here."""
    store.add([make_record(SCOPE, f"turn {i}") for i in range(20)])

    async def main() -> list[int]:
        other = ChromaHttpStore(address, collection=collection_name)
        await other.acount(SCOPE)  # its async client is open on this loop
        reads = [asyncio.create_task(store.acount(SCOPE)) for _ in range(50)]
        await asyncio.sleep(0)
        await other.aclose()
        return await asyncio.gather(*reads)

    assert asyncio.run(main()) == [20] * 50


def test_a_second_loop_reads_on_the_workers_until_the_first_is_gone(
    store: ChromaHttpStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add([make_record(SCOPE, f"turn {i}") for i in range(5)])
    first = asyncio.new_event_loop()
    running = threading.Thread(target=first.run_forever, daemon=True)
    running.start()
    try:
        assert asyncio.run_coroutine_threadsafe(store.acount(SCOPE), first).result(timeout=30) == 5
        made = _sync_calls(store, monkeypatch)
        assert asyncio.run(store.acount(SCOPE)) == 5
        assert made == ["get"]  # another loop: the sync client, on a worker
    finally:
        first.call_soon_threadsafe(first.stop)
        running.join(timeout=30)
        first.close()
    made.clear()
    assert asyncio.run(store.acount(SCOPE)) == 5  # the first loop is gone: this one reads natively
    assert made == []


def test_a_call_that_began_before_close_makes_no_client_after_it() -> None:
    """A read whose session goes on after the store closed meets StoreClosedError: no new HTTP
    client is made (and left open) for it."""
    reader = AsyncReader(urls.ServerAddress("127.0.0.1", 1, ssl=False), "memcore")

    async def main() -> None:
        await reader.aclose()
        with pytest.raises(StoreClosedError):
            await reader.make(CollectionCall("reading records", "get", {"ids": ["x"]}))

    asyncio.run(main())
    assert reader._api is None
