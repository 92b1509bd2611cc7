"""The OpenAI Agents SDK session (memcore.integrations.openai_agents) on Qdrant Edge and the server
engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from memcore_qdrant import QdrantStore

from memcore.store import Store
from memcore.testing.openai_agents_tests import AgentsSessionTests


class TestAgentsSessionOnQdrantEdge(AgentsSessionTests):
    @pytest.fixture
    def memcore_store(self, tmp_path: Path) -> Iterator[Store]:
        with QdrantStore.from_url(f"qdrant://{tmp_path / 'store'}") as store:
            yield store


class TestAgentsSessionOnTheServerEngine(AgentsSessionTests):
    """The engine of ``qdrant+http(s)://``, over qdrant-client's local mode."""

    @pytest.fixture
    def memcore_store(self, tmp_path: Path) -> Iterator[Store]:
        with QdrantStore.open_local_client(tmp_path / "local") as store:
            yield store
