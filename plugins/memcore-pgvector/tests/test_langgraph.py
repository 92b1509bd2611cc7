"""The LangGraph adapter (memcore.integrations.langgraph) on PostgreSQL, a table per test in the
session's server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import with_table
from memcore_pgvector import PgvectorStore

from memcore.store import Store
from memcore.testing.langgraph_tests import LangGraphStoreTests


class TestLangGraphOnPgvector(LangGraphStoreTests):
    langgraph_examples = 20

    @pytest.fixture
    def memcore_store(self, postgres_uri: str, table_name: str) -> Iterator[Store]:
        with PgvectorStore.from_url(with_table(postgres_uri, table_name)) as store:
            yield store
