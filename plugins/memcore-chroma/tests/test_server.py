"""A Chroma server that is down, or restarts mid-run."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from chroma_server import ChromaServer, free_port
from memcore_chroma import ChromaHttpStore
from memcore_chroma.urls import ServerAddress

from memcore.errors import StoreUnavailableError
from memcore.scope import Scope
from memcore.testing.helpers import make_record, random_vectors


def test_opening_without_a_server_is_unavailable() -> None:
    with pytest.raises(StoreUnavailableError):
        ChromaHttpStore(ServerAddress("127.0.0.1", free_port(), ssl=False))


def test_a_restarting_server_is_unavailable_then_works_again(tmp_path: Path) -> None:
    server = ChromaServer(tmp_path / "data")
    scope = Scope(tenant="t")
    record = make_record(scope, "survives the restart")
    with server:
        store = ChromaHttpStore(ServerAddress("127.0.0.1", server.port, ssl=False), collection="restarts")
        store.add([record], random_vectors(1))
        server.stop()
        calls = [
            lambda: store.count(scope),
            lambda: store.get(scope, [record.id]),
            lambda: store.search(scope, vector=random_vectors(1)[0]),
            lambda: store.add([make_record(scope)]),
            lambda: store.delete(scope, [record.id]),
        ]
        for call in calls:
            with pytest.raises(StoreUnavailableError):
                call()
        server.start()
        try:
            assert store.get(scope, [record.id]) == [record]
            assert store.search(scope, vector=random_vectors(1)[0], limit=1)[0].record.id == record.id
        finally:
            store.close()


def test_closing_a_store_closes_its_http_connections(chroma_server: ChromaServer) -> None:
    """A service that opens a store per request must not run out of file descriptors."""

    def sockets() -> int:
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
                count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        return count

    address = ServerAddress("127.0.0.1", chroma_server.port, ssl=False)
    ChromaHttpStore(address, collection="sockets").close()  # chromadb's one-time setup
    before = sockets()
    for _ in range(20):
        store = ChromaHttpStore(address, collection="sockets")
        store.add([make_record(Scope(tenant="t"))], random_vectors(1))
        store.close()
    assert sockets() - before <= 1
