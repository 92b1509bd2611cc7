"""Fixtures: a real Chroma server for the session, a shared embedded folder, and ``open_store``
(a fresh collection, embedded or on the server).

Each conformance test gets a fresh collection (cheap) in a session-wide
folder or server, instead of a fresh folder or server (expensive).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chroma_server import ChromaServer
from chromadb.errors import NotFoundError
from memcore_chroma import ChromaHttpStore, ChromaStore, connection, urls
from memcore_chroma.calls import CollectionCall
from memcore_chroma.store import ChromaStoreBase

# No embedding model download, no telemetry: every vector comes from the tests.
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    """One ``chroma run`` server for the whole session, stopped by PID afterwards."""
    with ChromaServer(tmp_path_factory.mktemp("chroma-server") / "data") as server:
        yield server


@pytest.fixture(scope="session")
def embedded_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A persist folder for the session, whose client stays open between tests.

    Stores opened on it share this process's one client; holding a reference
    here spares each test the client's start-up (about 0.2 s).
    """
    path = tmp_path_factory.mktemp("chroma-embedded")
    keeper = connection.persistent(path)
    try:
        yield path
    finally:
        keeper.release()


@pytest.fixture
def collection_name() -> str:
    """A collection name no other test uses."""
    return f"test-{uuid.uuid4().hex}"


def drop_collection(chroma: connection.Connection, name: str) -> None:
    """Delete a test's collection, if it exists, so that the session's store stays small."""
    try:
        with contextlib.suppress(NotFoundError):
            chroma.client.delete_collection(name)
    finally:
        chroma.release()


@pytest.fixture(params=["embedded", "server"])
def open_store(
    request: pytest.FixtureRequest, tmp_path: Path, collection_name: str
) -> Iterator[Callable[[], ChromaStoreBase]]:
    """Opens a store on one fresh collection: embedded in a fresh folder, or on the session's server."""
    if request.param == "embedded":
        yield lambda: ChromaStore(tmp_path / "db", collection=collection_name)
        return
    server: ChromaServer = request.getfixturevalue("chroma_server")
    address = urls.ServerAddress("127.0.0.1", server.port, ssl=False)
    yield lambda: ChromaHttpStore(address, collection=collection_name)
    drop_collection(
        connection.http("127.0.0.1", server.port, False, address.tenant, address.database), collection_name
    )


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[CollectionCall]:
    """Every collection call the sync API makes, in order."""
    made: list[CollectionCall] = []
    make = ChromaStoreBase._make

    def spy(self: ChromaStoreBase, call: CollectionCall) -> Any:
        made.append(call)
        return make(self, call)

    monkeypatch.setattr(ChromaStoreBase, "_make", spy)
    return made
