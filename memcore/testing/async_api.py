"""The conformance suite through the async API, and the tests only an event loop can run.

:class:`AsyncStoreConformance` runs the tests of :class:`~memcore.testing.StoreConformance` (all
but the Hypothesis differential ones, whose filter logic the async twins share with the sync
calls) with every store and memory call made through its async twin (``store.add`` becomes
``await store.aadd``, on an event loop of the suite's own), plus :class:`AsyncAPITests`: many
tasks on one loop, cancellation, and a loop that keeps running while calls are in flight::

    class TestMyStoreAsync(AsyncStoreConformance):
        store_factory = TestMyStore.store_factory   # the sync class's fixture
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar, cast

import pytest

from memcore.agent.memories import LongtermMemory
from memcore.errors import StoreClosedError
from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing.agent_memory_tests import AgentMemoryConformance
from memcore.testing.filter_tests import FilterTests
from memcore.testing.helpers import StoreFactory, StoreFixtures, make_record, new_scope, random_vectors
from memcore.testing.keyword_tests import KeywordSearchTests
from memcore.testing.lifecycle_tests import LifecycleTests
from memcore.testing.safety_tests import BadInputTests, ClosedStoreTests, ScopeIsolationTests
from memcore.testing.store_tests import (
    AddTests,
    ConcurrencyTests,
    CountTests,
    DeleteTests,
    GetTests,
    ListTests,
    PersistenceTests,
    SearchTests,
    VectorSpaceTests,
)

T = TypeVar("T")

_STORE_TWINS = frozenset(
    [
        "add",
        "get",
        "vectors",
        "list",
        "search",
        "count",
        "delete",
        "delete_where",
        "purge",
        "sweep",
        "update",
        "scopes",
        "vector_space",
        "bind_vector_space",
        "close",
    ]
)

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _suite_loop() -> asyncio.AbstractEventLoop:
    """One event loop, on a daemon thread, that every driven store's calls run on."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="memcore-suite-loop", daemon=True).start()
        return _loop


def run_on_suite_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on the suite's event loop from any thread, and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coroutine, _suite_loop()).result()


_MEMORY_TWINS = frozenset(
    [
        "write",
        "write_records",
        "observe",
        "retrieve",
        "get_context",
        "forget",
        "forget_where",
        "clear",
        "barrier",
    ]
)


class AsyncDriven:
    """An object whose sync methods named in ``twins`` are answered by their async twins:
    ``add`` runs ``await wrapped.aadd`` on the suite's loop. Everything else is the wrapped
    object's."""

    def __init__(self, wrapped: Any, twins: frozenset[str]) -> None:
        self.wrapped, self._twins = wrapped, twins

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("wrapped", "_twins"):
            object.__setattr__(self, name, value)
        else:  # the store's clock, set by a test
            setattr(self.wrapped, name, value)

    def __getattr__(self, name: str) -> Any:
        if name in self._twins:
            twin: Callable[..., Coroutine[Any, Any, Any]] = getattr(self.wrapped, "a" + name)
            return lambda *args, **kwargs: run_on_suite_loop(twin(*args, **kwargs))
        return getattr(self.wrapped, name)


class AsyncDrivenStore(AsyncDriven):
    """A store answered by its async twins; ``with`` uses ``async with``."""

    def __init__(self, store: Store) -> None:
        super().__init__(store, _STORE_TWINS)

    def __enter__(self) -> AsyncDrivenStore:
        run_on_suite_loop(self.wrapped.__aenter__())
        return self

    def __exit__(self, *exc_info: Any) -> None:
        run_on_suite_loop(self.wrapped.__aexit__(None, None, None))


def driven(store: Store) -> Store:
    """``store`` behind :class:`AsyncDrivenStore`, typed as the store the tests expect."""
    return cast(Store, AsyncDrivenStore(store))


def unwrapped(store: Store) -> Store:
    """The store an :class:`AsyncDrivenStore` drives (or ``store`` itself)."""
    return cast(Store, getattr(store, "wrapped", store))


class AsyncAgentMemoryTests(AgentMemoryConformance):
    """The agent-memory tests with every memory call made through its async twin."""

    def memory(self, store: Store, scope: Scope, **options: Any) -> LongtermMemory:
        # Over the store itself: the memory's twins run its sync code on the store's workers,
        # where a store call must not wait for those same workers.
        memory = super().memory(unwrapped(store), scope, **options)
        return cast(LongtermMemory, AsyncDriven(memory, _MEMORY_TWINS))


class ThroughAsyncAPI(StoreFixtures):
    """Opens the store under test behind :class:`AsyncDrivenStore`."""

    @pytest.fixture
    def open_store(self, store_factory: StoreFactory) -> StoreFactory:
        return lambda: driven(store_factory())


class AsyncAPITests(ThroughAsyncAPI):
    """What only an event loop shows: many tasks at once, cancellation, a loop never blocked."""

    def test_many_tasks_on_one_loop_keep_their_writes_and_scopes(self, store: Store) -> None:
        native = unwrapped(store)
        scopes = [new_scope(user_id=f"agent-{i}") for i in range(32)]

        async def agent(index: int) -> list[str]:
            for turn in range(5):
                record = make_record(scopes[index], f"agent {index} turn {turn}", minute=turn)
                await native.aadd([record], random_vectors(1, seed=index * 10 + turn))
                await native.asearch(scopes[index], vector=random_vectors(1, seed=turn)[0], limit=3)
            return [r.message.content for r in await native.alist(scopes[index])]

        async def main() -> list[list[str]]:
            return await asyncio.gather(*(agent(i) for i in range(len(scopes))))

        for index, contents in enumerate(run_on_suite_loop(main())):
            assert contents == [f"agent {index} turn {turn}" for turn in range(5)]

    def test_blocking_hooks_never_run_on_the_loop_thread(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        native = unwrapped(store)
        threads: set[int] = set()
        hooks = ("_add", "_get", "_list", "_search", "_count", "_delete")
        blocking = [hook for hook in hooks if hook not in type(native)._native_hooks]
        for hook in blocking:
            monkeypatch.setattr(native, hook, _spying(getattr(native, hook), threads))
        scope = new_scope()
        record = make_record(scope)

        async def main() -> int:
            await native.aadd([record], random_vectors(1))
            await native.aget(scope, [record.id])
            await native.alist(scope, filter={"role": "user"})
            await native.asearch(scope, vector=random_vectors(1)[0])
            await native.acount(scope)
            await native.adelete(scope, [record.id])
            return threading.get_ident()

        loop_thread = run_on_suite_loop(main())
        assert blocking == [] or threads, "the spies saw no hook call"
        assert loop_thread not in threads

    def test_the_loop_keeps_beating_while_a_long_call_runs(self, store: Store) -> None:
        """A heartbeat every millisecond: while a batch write that takes the sync API ``D`` seconds
        is in flight, no beat is late by ``D / 2`` (a call run on the loop makes one ``D`` late).

        The cyclic garbage collector is paused meanwhile: a full collection stops every thread
        of the process (100 ms in this suite's heap), which says nothing about where calls run.
        """
        native = unwrapped(store)
        size, took = 250, 0.0
        while took < 0.2 and size < 10_000:
            size = min(size * 2, 10_000)
            batch = [make_record(new_scope(), f"turn {i}") for i in range(size)]
            with _cyclic_gc_paused():
                started = time.perf_counter()
                native.add(batch, random_vectors(size, seed=size))
                took = time.perf_counter() - started
        late: list[float] = []

        async def heartbeat(stop: asyncio.Event) -> None:
            while not stop.is_set():
                due = time.perf_counter() + 0.001
                await asyncio.sleep(0.001)
                late.append(time.perf_counter() - due)

        async def write_while_beating(batch: list[MemoryRecord]) -> None:
            stop = asyncio.Event()
            beating = asyncio.create_task(heartbeat(stop))
            await native.aadd(batch, random_vectors(size, seed=size + 1))
            stop.set()
            await beating

        batch = [make_record(new_scope(), f"turn {i}") for i in range(size)]
        with _cyclic_gc_paused():
            run_on_suite_loop(write_while_beating(batch))
        assert late and max(late) < took / 2, (max(late), took, size)

    def test_a_cancelled_batch_lands_whole_or_not_at_all(self, store: Store) -> None:
        native = unwrapped(store)
        for delay in (0.0, 0.001, 0.005, 0.02):
            scope = new_scope()
            batch = [make_record(scope, f"turn {i}") for i in range(300)]

            async def cancel_midway(batch: list[Any] = batch, delay: float = delay) -> None:
                writing = asyncio.create_task(native.aadd(batch, random_vectors(len(batch))))
                await asyncio.sleep(delay)
                writing.cancel()
                with contextlib.suppress(asyncio.CancelledError):  # or it finished first
                    await writing

            run_on_suite_loop(cancel_midway())
            assert run_on_suite_loop(native.acount(scope)) in (0, len(batch))
            run_on_suite_loop(native.run_in_worker(lambda: None))
            assert run_on_suite_loop(native.acount(scope)) in (0, len(batch))

    def test_cancelled_reads_leave_the_store_usable_and_closable(self, store: Store) -> None:
        native = unwrapped(store)
        scope = new_scope()
        native.add([make_record(scope, f"r{i}") for i in range(50)], random_vectors(50))

        async def main() -> int:
            queries = random_vectors(20, seed=3)
            reads = [asyncio.create_task(native.asearch(scope, vector=query)) for query in queries]
            await asyncio.sleep(0)
            for read in reads:
                read.cancel()
            await asyncio.gather(*reads, return_exceptions=True)
            return await asyncio.wait_for(native.acount(scope), timeout=60)

        assert run_on_suite_loop(main()) == 50
        run_on_suite_loop(asyncio.wait_for(native.aclose(), timeout=60))
        with pytest.raises(StoreClosedError):
            run_on_suite_loop(native.acount(scope))

    def test_calls_waiting_for_a_worker_when_the_store_closes_raise_store_closed(self, store: Store) -> None:
        native = unwrapped(store)
        scope = new_scope()

        async def main() -> list[BaseException | int]:
            counts = [asyncio.create_task(native.acount(scope)) for _ in range(20)]
            await asyncio.sleep(0)
            await native.aclose()
            return await asyncio.gather(*counts, return_exceptions=True)

        for outcome in run_on_suite_loop(main()):
            assert outcome == 0 or isinstance(outcome, StoreClosedError), outcome


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _spying(hook: Callable[..., T], threads: set[int]) -> Callable[..., T]:
    """``hook``, noting the thread of each call in ``threads``."""

    @functools.wraps(hook)
    def spy(*args: Any, **kwargs: Any) -> T:
        threads.add(threading.get_ident())
        return hook(*args, **kwargs)

    return spy


class AsyncStoreConformance(
    AddTests,
    GetTests,
    ListTests,
    SearchTests,
    KeywordSearchTests,
    CountTests,
    DeleteTests,
    FilterTests,
    ScopeIsolationTests,
    BadInputTests,
    ClosedStoreTests,
    PersistenceTests,
    ConcurrencyTests,
    VectorSpaceTests,
    LifecycleTests,
    AsyncAgentMemoryTests,
    AsyncAPITests,
):
    """The store conformance tests through the async API, and :class:`AsyncAPITests`."""
