"""The async API's machinery: worker pools, forked children, context variables, ``async with``."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
import time
from collections.abc import Sequence
from uuid import UUID

import pytest

from memcore.agent.memories import LongtermMemory
from memcore.embedders.hashing import HashEmbedder
from memcore.errors import (
    InvalidInputError,
    InvalidRecordError,
    ScopeError,
    StoreClosedError,
    StoreForkedError,
)
from memcore.filters import Comparison
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.stores.in_memory import InMemoryStore
from memcore.validation import Matrix
from memcore.workers import WorkerPool

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


def test_a_pool_runs_at_most_its_size_at_once_on_threads_of_its_own() -> None:
    pool = WorkerPool(2, "test")
    running, most = 0, 0
    lock = threading.Lock()

    def work() -> bool:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.02)
        with lock:
            running -= 1
        return pool.in_worker()

    async def main() -> list[bool]:
        return await asyncio.gather(*(pool.run(work) for _ in range(8)))

    assert asyncio.run(main()) == [True] * 8
    assert most == 2
    assert not pool.in_worker()
    pool.shutdown()


def test_a_pool_carries_the_callers_context_variables() -> None:
    pool = WorkerPool(1, "test")

    async def main() -> str:
        REQUEST_ID.set("req-7")
        return await pool.run(REQUEST_ID.get)

    assert asyncio.run(main()) == "req-7"
    pool.shutdown()


@pytest.mark.parametrize("size", [0, -1, True, 1.5])
def test_a_pool_needs_a_positive_size(size: object) -> None:
    with pytest.raises(InvalidInputError):
        WorkerPool(size, "test")  # type: ignore[arg-type]


def test_async_with_closes_the_store() -> None:
    async def main() -> InMemoryStore:
        async with InMemoryStore() as store:
            assert await store.acount(Scope(tenant="t")) == 0
        return store

    store = asyncio.run(main())
    assert store.closed
    with pytest.raises(StoreClosedError):
        asyncio.run(store.acount(Scope(tenant="t")))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_gets_a_typed_error_from_the_async_api_not_a_hang() -> None:
    """The parent's worker thread does not exist in the child: the child's first async call must
    not wait for it forever, but fail as its sync call does."""
    store = InMemoryStore()
    scope = Scope(tenant="t")
    store.add([MemoryRecord(scope=scope, message=Message(role="user", content="x"))])
    assert asyncio.run(store.acount(scope)) == 1  # the pool's thread now runs in the parent
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 3
        try:
            asyncio.run(asyncio.wait_for(store.acount(scope), timeout=10))
        except StoreForkedError:
            code = 0
        except TimeoutError:
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert asyncio.run(store.acount(scope)) == 1
    store.close()


def test_the_first_async_call_does_not_wait_for_the_state_lock() -> None:
    """``bind_vector_space`` holds the store's state lock during I/O; the loop must not queue
    behind it to start the store's workers."""
    store = InMemoryStore()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store._state_lock:
            held.set()
            release.wait(timeout=10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        assert asyncio.run(store.acount(Scope(tenant="t"))) == 0
        assert not release.is_set()  # answered while the lock was still held
    finally:
        release.set()
        holder.join()
        store.close()


def test_a_closed_store_starts_no_workers() -> None:
    store = InMemoryStore()
    store.close()
    with pytest.raises(StoreClosedError):
        asyncio.run(store.acount(Scope(tenant="t")))
    with pytest.raises(StoreClosedError):
        asyncio.run(store.run_in_worker(lambda: None))
    assert store._workers is None


class SlowAsyncDelete(InMemoryStore):
    """An engine with an async ``_delete`` (one round trip each) that leaves metadata filters to
    the exact fallback: ``delete_where`` on metadata then deletes scope by scope."""

    def _expresses(self, comparison: Comparison) -> bool:
        return not comparison.field.startswith("metadata.")

    async def _adelete(self, scope: Scope, ids: list[UUID]) -> int:
        await asyncio.sleep(0.05)
        return self._delete(scope, ids)


def test_a_timed_out_write_over_several_async_hooks_still_lands_whole() -> None:
    store = SlowAsyncDelete()
    scopes = [Scope(tenant="t", user_id=user) for user in "abc"]
    store.add(
        [MemoryRecord(scope=s, message=Message(role="user", content="x"), metadata={"n": 1}) for s in scopes]
    )

    async def main() -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.07):  # after the first of three deletes
                await store.adelete_where(Scope(tenant="t"), {"metadata.n": 1})
        await asyncio.sleep(0.3)

    asyncio.run(main())
    assert store.count(Scope(tenant="t")) == 0
    store.close()


def test_async_memory_writes_refuse_what_the_sync_ones_refuse_and_embed_nothing_first() -> None:
    store = InMemoryStore()
    seen: list[str] = []

    class Spy(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> Matrix:
            seen.extend(texts)
            return super().embed(texts)

    memory = LongtermMemory(store, Spy(dim=16), Scope(tenant="t", user_id="me"))
    outsider = MemoryRecord(
        scope=Scope(tenant="t", user_id="someone-else"), message=Message(role="user", content="SECRET")
    )
    for bad, error in ((["not a message"], InvalidRecordError), (["not a message"], InvalidRecordError)):
        with pytest.raises(error):
            memory.write(bad)  # type: ignore[arg-type]
        with pytest.raises(error):
            asyncio.run(memory.awrite(bad))  # type: ignore[arg-type]
    with pytest.raises(ScopeError):
        asyncio.run(memory.awrite_records([outsider]))
    assert "SECRET" not in seen
    store.close()
