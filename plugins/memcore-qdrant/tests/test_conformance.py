"""memcore's whole conformance suite, on every embedded mode of the plugin.

``qdrant:///path`` and ``qdrant+memory://`` run Qdrant Edge, the default. The
third class drives the very code the ``qdrant+http(s)://`` server path uses
(:class:`~memcore_qdrant.client_engine.ClientEngine`) through qdrant-client's
local mode, since no Qdrant server can run here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from memcore_qdrant import QdrantMemoryStore, QdrantStore

from memcore.testing import StoreConformance, StoreFactory


class TestEmbeddedStore(StoreConformance):
    """``qdrant:///path``: Qdrant Edge in a folder, reopened from the same folder."""

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        return lambda: QdrantStore.from_url(f"qdrant://{tmp_path / 'store'}")


class TestInMemoryStore(StoreConformance):
    """``qdrant+memory://``: Qdrant Edge in a temporary folder, not durable."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return lambda: QdrantMemoryStore.from_url("qdrant+memory://")


class TestClientEngineOnLocalMode(StoreConformance):
    """The server path's engine, over qdrant-client's local mode."""

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        return lambda: QdrantStore.open_local_client(tmp_path / "local")
