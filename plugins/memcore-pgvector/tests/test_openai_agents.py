"""The OpenAI Agents SDK session (memcore.integrations.openai_agents) on PostgreSQL, a table per test
in the session's server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import with_table
from memcore_pgvector import PgvectorStore

from memcore.store import Store
from memcore.testing.openai_agents_tests import AgentsSessionTests


class TestAgentsSessionOnPgvector(AgentsSessionTests):
    @pytest.fixture
    def memcore_store(self, postgres_uri: str, table_name: str) -> Iterator[Store]:
        with PgvectorStore.from_url(with_table(postgres_uri, table_name)) as store:
            yield store
