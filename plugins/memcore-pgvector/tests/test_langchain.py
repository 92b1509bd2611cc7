"""LangChain's standard vector-store tests on PostgreSQL (memcore.integrations.langchain)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import with_table
from langchain_tests.integration_tests import VectorStoreIntegrationTests
from memcore_pgvector import PgvectorStore

from memcore.integrations.langchain import MemcoreVectorStore
from memcore.scope import Scope


class TestOnPgvector(VectorStoreIntegrationTests):
    """A table of its own per test, in the session's server."""

    @pytest.fixture()
    def vectorstore(self, postgres_uri: str, table_name: str) -> Iterator[MemcoreVectorStore]:
        with PgvectorStore.from_url(with_table(postgres_uri, table_name)) as store:
            yield MemcoreVectorStore(store, Scope(tenant="acme", user_id="u1"), self.get_embeddings())
