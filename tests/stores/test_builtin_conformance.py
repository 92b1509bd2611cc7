"""The built-in stores run the whole conformance suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from memcore.stores.jsonl import JsonlStore
from memcore.stores.memory import MemoryStore
from memcore.testing import StoreConformance, StoreFactory


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return MemoryStore


class TestJsonlStore(StoreConformance):
    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        return lambda: JsonlStore(tmp_path / "store")
