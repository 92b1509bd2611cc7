"""The OpenAI Agents SDK session (memcore.integrations.openai_agents) on Chroma, embedded and on the
session's real ``chroma run`` server (the ``open_store`` fixture's two params)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from memcore_chroma.store import ChromaStoreBase

from memcore.store import Store
from memcore.testing.openai_agents_tests import AgentsSessionTests


class TestAgentsSessionOnChroma(AgentsSessionTests):
    @pytest.fixture
    def memcore_store(self, open_store: Callable[[], ChromaStoreBase]) -> Iterator[Store]:
        with open_store() as store:
            yield store
