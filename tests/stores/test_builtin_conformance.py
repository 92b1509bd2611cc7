"""The built-in stores run the whole conformance suite."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from memcore.filters import Comparison
from memcore.queries import ListQuery, SearchQuery
from memcore.records import MemoryRecord, Message, ScoredRecord
from memcore.scope import Scope
from memcore.stores.in_memory import InMemoryStore
from memcore.stores.jsonl import JsonlStore
from memcore.testing import AsyncStoreConformance, StoreConformance, StoreFactory
from memcore.validation import Matrix


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return InMemoryStore


class TestJsonlStore(StoreConformance):
    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        return lambda: JsonlStore(tmp_path / "store")


class MemoryStoreDecliningMetadata(InMemoryStore):
    """A store whose engine evaluates no metadata comparison and no time bound: what it declines
    reaches :class:`~memcore.store.BaseStore`'s exact fallback, on every read and delete path."""

    def _expresses(self, comparison: Comparison) -> bool:
        return comparison.field in ("role", "kind")


class TestExactFallback(StoreConformance):
    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return MemoryStoreDecliningMetadata


class TestMemoryStoreAsync(AsyncStoreConformance):
    store_factory = TestMemoryStore.store_factory


class TestJsonlStoreAsync(AsyncStoreConformance):
    store_factory = TestJsonlStore.store_factory


class TestExactFallbackAsync(AsyncStoreConformance):
    store_factory = TestExactFallback.store_factory


class MemoryStoreWithAsyncHooks(MemoryStoreDecliningMetadata):
    """A store whose engine has an async client for some hooks (here a thread standing in for
    one): :func:`memcore.plans.arun_plan` awaits those and runs the others on the workers,
    through the exact fallback's over-fetching too."""

    async def _aadd(self, records: list[MemoryRecord], vectors: Matrix | None) -> None:
        await asyncio.to_thread(self._add, records, vectors)

    async def _aget(self, scope: Scope, ids: list[UUID]) -> list[MemoryRecord]:
        return await asyncio.to_thread(self._get, scope, ids)

    async def _alist(self, scope: Scope, query: ListQuery) -> list[MemoryRecord]:
        return await asyncio.to_thread(self._list, scope, query)

    async def _asearch(self, scope: Scope, query: SearchQuery) -> list[ScoredRecord]:
        return await asyncio.to_thread(self._search, scope, query)


def test_async_hooks_are_found_by_name_and_awaited(monkeypatch: pytest.MonkeyPatch) -> None:
    assert MemoryStoreWithAsyncHooks._native_hooks == {"_add", "_get", "_list", "_search"}
    assert InMemoryStore._native_hooks == frozenset()
    store = MemoryStoreWithAsyncHooks()
    awaited: list[str] = []
    for hook in ("_aadd", "_alist", "_asearch"):
        variant = getattr(store, hook)

        async def counting(*args: object, _variant: Any = variant, _hook: str = hook) -> Any:
            awaited.append(_hook)
            return await _variant(*args)

        monkeypatch.setattr(store, hook, counting)
    scope = Scope(tenant="t")

    async def main() -> None:
        await store.aadd([MemoryRecord(scope=scope, message=Message(role="user", content="x"))], [[1.0, 0.0]])
        await store.alist(scope, filter={"metadata.k": 1})
        await store.asearch(scope, vector=[1.0, 0.0], filter={"metadata.k": 1})

    asyncio.run(main())
    assert awaited == ["_aadd", "_alist", "_asearch"]


class TestAsyncHooksAsync(AsyncStoreConformance):
    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return MemoryStoreWithAsyncHooks
