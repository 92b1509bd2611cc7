"""A Chroma server that is down, or restarts mid-run."""

from __future__ import annotations

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
