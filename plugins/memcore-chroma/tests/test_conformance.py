"""The whole conformance suite, against embedded Chroma and against a real Chroma server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from chroma_server import ChromaServer
from conftest import drop_collection
from memcore_chroma import ChromaHttpStore, ChromaMemoryStore, ChromaStore, connection, urls

from memcore.testing import StoreConformance, StoreFactory


class TestEmbeddedChroma(StoreConformance):
    """``chroma:///path``: a PersistentClient; each test has its own collection."""

    @pytest.fixture
    def store_factory(self, embedded_path: Path, collection_name: str) -> Iterator[StoreFactory]:
        yield lambda: ChromaStore(embedded_path, collection=collection_name)
        drop_collection(connection.persistent(embedded_path), collection_name)


class TestServerChroma(StoreConformance):
    """``chroma+http://``: the session's ``chroma run`` server; each test has its own collection."""

    @pytest.fixture
    def store_factory(self, chroma_server: ChromaServer, collection_name: str) -> Iterator[StoreFactory]:
        address = urls.ServerAddress("127.0.0.1", chroma_server.port, ssl=False)
        yield lambda: ChromaHttpStore(address, collection=collection_name)
        drop_collection(
            connection.http("127.0.0.1", chroma_server.port, False, address.tenant, address.database),
            collection_name,
        )


class TestMemoryChroma(StoreConformance):
    """``chroma+memory://``: an EphemeralClient, each store in a collection of its own."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return ChromaMemoryStore
