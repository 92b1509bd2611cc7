"""The LangGraph adapter (memcore.integrations.langgraph) on Chroma, embedded and on the session's
real ``chroma run`` server (the ``open_store`` fixture's two params)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from memcore_chroma.store import ChromaStoreBase

from memcore.store import Store
from memcore.testing.langgraph_tests import LangGraphStoreTests


class TestLangGraphOnChroma(LangGraphStoreTests):
    langgraph_examples = 12
    langgraph_steps = 10

    @pytest.fixture
    def memcore_store(self, open_store: Callable[[], ChromaStoreBase]) -> Iterator[Store]:
        with open_store() as store:
            yield store
