"""LangChain's standard vector-store tests on the plugin (memcore.integrations.langchain).

LangChain's test ids are strings such as "1", which Qdrant refuses as point ids:
the adapter maps each to a UUID, and these tests show it on every embedded mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_tests.integration_tests import VectorStoreIntegrationTests
from memcore_qdrant import QdrantStore

from memcore.integrations.langchain import MemcoreVectorStore
from memcore.scope import Scope

SCOPE = Scope(tenant="acme", user_id="u1")


class TestOnQdrantEdge(VectorStoreIntegrationTests):
    @pytest.fixture()
    def vectorstore(self, tmp_path: Path) -> Iterator[MemcoreVectorStore]:
        with QdrantStore.from_url(f"qdrant://{tmp_path / 'store'}") as store:
            yield MemcoreVectorStore(store, SCOPE, self.get_embeddings())


class TestOnTheServerEngine(VectorStoreIntegrationTests):
    """The engine of ``qdrant+http(s)://``, over qdrant-client's local mode."""

    @pytest.fixture()
    def vectorstore(self, tmp_path: Path) -> Iterator[MemcoreVectorStore]:
        with QdrantStore.open_local_client(tmp_path / "local") as store:
            yield MemcoreVectorStore(store, SCOPE, self.get_embeddings())
