"""The async API's machinery: worker pools, forked children, context variables, ``async with``."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import time

import pytest

from memcore.errors import InvalidInputError, StoreClosedError, StoreForkedError
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.stores.in_memory import InMemoryStore
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
