"""LangChain's standard vector-store tests on embedded Chroma (memcore.integrations.langchain)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_tests.integration_tests import VectorStoreIntegrationTests
from memcore_chroma import ChromaStore

from memcore.integrations.langchain import MemcoreVectorStore
from memcore.scope import Scope


class TestOnChroma(VectorStoreIntegrationTests):
    @pytest.fixture()
    def vectorstore(self, tmp_path: Path) -> Iterator[MemcoreVectorStore]:
        with ChromaStore(tmp_path) as store:
            yield MemcoreVectorStore(store, Scope(tenant="acme", user_id="u1"), self.get_embeddings())
