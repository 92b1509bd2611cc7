"""Discovery through the entry point, URL forms, and a server that is down."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from memcore_qdrant import QdrantMemoryStore, QdrantServerStore, QdrantStore
from memcore_qdrant import store as store_module
from memcore_qdrant.connections import Connection

from memcore import open_store
from memcore.errors import InvalidInputError, StoreUnavailableError
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope


@pytest.mark.usefixtures("only_this_plugin")
def test_open_store_finds_the_plugin_through_its_entry_point(tmp_path: Path) -> None:
    scope = Scope(tenant="acme")
    record = MemoryRecord(scope=scope, message=Message(role="user", content="hello"))
    with open_store(f"qdrant://{tmp_path / 'store'}") as store:
        assert isinstance(store, QdrantStore)
        store.add([record])
    with open_store(f"QDRANT://{tmp_path / 'store'}") as store:
        assert store.get(scope, [record.id]) == [record]
    with open_store("qdrant+memory://") as memory:
        assert isinstance(memory, QdrantMemoryStore)
        assert memory.count(scope) == 0


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.usefixtures("only_this_plugin")
def test_a_server_that_is_down_is_store_unavailable() -> None:
    with pytest.raises(StoreUnavailableError, match="cannot be reached"):
        open_store(f"qdrant+http://127.0.0.1:{_closed_port()}?collection=notes")


@pytest.mark.parametrize(
    ("url", "base", "collection"),
    [
        ("qdrant+http://localhost", "http://localhost:6333", "memcore"),
        ("qdrant+https://db.example.com:443?collection=agents", "https://db.example.com:443", "agents"),
        ("qdrant+http://[::1]:6333/", "http://[::1]:6333", "memcore"),
    ],
)
def test_server_urls(monkeypatch: pytest.MonkeyPatch, url: str, base: str, collection: str) -> None:
    seen: list[tuple[str, str]] = []

    def fake_connect(base_url: str, name: str) -> Connection:
        seen.append((base_url, name))
        raise StoreUnavailableError("not connecting in this test")

    monkeypatch.setattr(store_module, "connect_server", fake_connect)
    with pytest.raises(StoreUnavailableError):
        QdrantServerStore.from_url(url)
    assert seen == [(base, collection)]


@pytest.mark.parametrize(
    ("store_class", "url"),
    [
        (QdrantStore, "qdrant://"),
        (QdrantMemoryStore, "qdrant+memory://somewhere"),
        (QdrantServerStore, "qdrant+ftp://host"),
        (QdrantServerStore, "qdrant+http://host:notaport"),
        (QdrantServerStore, "qdrant+http://host:6333/bad/name"),
        (QdrantServerStore, "qdrant+http://host:6333/agents"),  # the collection is ?collection=
        (QdrantStore, "qdrant:///tmp/x?dimension=8"),
        (QdrantServerStore, "qdrant+http://host?collection="),
        (QdrantStore, "qdrant:///tmp/x\x00y"),
        (QdrantServerStore, "qdrant+http://[::1"),
        (QdrantServerStore, "qdrant+http://host:99999"),
    ],
)
def test_malformed_urls_are_invalid_input(store_class: type[QdrantStore], url: str) -> None:
    with pytest.raises(InvalidInputError):
        store_class.from_url(url)


@pytest.mark.parametrize("url", ["qdrant+http://user:s3cret@localhost/c", "qdrant+https://:s3cret@db:443"])
def test_credentials_in_a_server_url_are_refused(url: str) -> None:
    with pytest.raises(InvalidInputError, match="QDRANT_API_KEY") as raised:
        QdrantServerStore.from_url(url)
    assert "s3cret" not in str(raised.value)
