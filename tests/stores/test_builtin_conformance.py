"""The built-in stores run the whole conformance suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from memcore.filters import Comparison
from memcore.stores.in_memory import InMemoryStore
from memcore.stores.jsonl import JsonlStore
from memcore.testing import StoreConformance, StoreFactory


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
