"""The shared conformance suite against a real PostgreSQL server with pgvector."""

from __future__ import annotations

import pytest
from conftest import with_table
from memcore_pgvector import PgvectorStore

from memcore.testing import AsyncStoreConformance, StoreConformance, StoreFactory


class TestPgvectorStore(StoreConformance):
    """``postgresql://``: a table of its own per test, in the session's server."""

    @pytest.fixture
    def store_factory(self, postgres_uri: str, table_name: str) -> StoreFactory:
        url = with_table(postgres_uri, table_name)
        return lambda: PgvectorStore.from_url(url)


class TestPgvectorStoreAsync(AsyncStoreConformance):
    """The store tests through the async API, on the same server."""

    store_factory = TestPgvectorStore.store_factory
