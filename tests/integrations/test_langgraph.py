"""The LangGraph adapter (memcore.integrations.langgraph) on the built-in stores and on a store
without expiry, and what only the in-memory store needs to show."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from memcore_example_store.store import ExampleStore  # type: ignore[import-untyped]

from memcore import open_store
from memcore.errors import InvalidInputError, UnsupportedOperationError
from memcore.integrations.langgraph import MemcoreLangGraphStore
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing.langgraph_tests import LangGraphStoreTests


class TestLangGraphOnMemoryStore(LangGraphStoreTests):
    langgraph_examples = 60

    @pytest.fixture
    def memcore_store(self) -> Iterator[Store]:
        with open_store("memory://") as store:
            yield store


class TestLangGraphOnJsonlStore(LangGraphStoreTests):
    @pytest.fixture
    def memcore_store(self, tmp_path: Path) -> Iterator[Store]:
        with open_store(f"jsonl://{tmp_path}") as store:
            yield store


class TestLangGraphOnAStoreWithoutExpiry(LangGraphStoreTests):
    """The third-party example plugin (``example://``), which cannot expire records."""

    langgraph_examples = 15

    @pytest.fixture
    def memcore_store(self) -> Iterator[Store]:
        with ExampleStore() as store:  # the suite loads no plugin by entry point
            yield store

    def test_ttl_is_refused_typed_where_the_store_cannot_expire_records(self, memcore_store: Store) -> None:
        with pytest.raises(UnsupportedOperationError):
            MemcoreLangGraphStore(memcore_store, Scope(tenant="t"), ttl={"default_ttl": 5.0})
        adapter = MemcoreLangGraphStore(memcore_store, Scope(tenant="t"))
        assert adapter.supports_ttl is False
        with pytest.raises(UnsupportedOperationError):
            adapter.put(("a",), "k", {"v": 1}, ttl=5.0)
        assert adapter.get(("a",), "k") is None


def test_small_misuses_answer_as_langgraph_or_raise_typed_errors() -> None:
    with open_store("memory://") as store:
        adapter = MemcoreLangGraphStore(store, Scope(tenant="t"))
        adapter.put(["a"], "k", {"v": 1})  # type: ignore[arg-type]  # a list namespace, as get takes
        assert adapter.get(("a",), "k") is not None
        assert adapter.list_namespaces(suffix=("x",) * 17) == []  # deeper than any namespace
        for ttl in ("5", True):
            with pytest.raises(InvalidInputError, match="number of minutes"):
                adapter.put(("a",), "t", {"v": 1}, ttl=ttl)  # type: ignore[arg-type]
        adapter.delete(["a"], "k")  # type: ignore[arg-type]
        assert adapter.get(("a",), "k") is None and adapter.get(("a",), "t") is None
