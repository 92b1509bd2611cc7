"""The server path (``qdrant+http(s)://``): the server's version, clients sharing a collection, indexes.

No Qdrant server runs here: the version check meets a stub HTTP server that
answers like an old Qdrant, and clients sharing a collection are several
:class:`~memcore_qdrant.client_engine.ClientEngine` objects over one
qdrant-client in-memory client, as several processes share a server's collection.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from memcore_qdrant import IncompatibleServerError, QdrantServerStore
from memcore_qdrant import payload as fields
from memcore_qdrant.client_engine import (
    KEYWORDS_KEY,
    MIN_SERVER_VERSION,
    STORAGE_IDS_KEY,
    ClientEngine,
    check_server_version,
)
from memcore_qdrant.connections import Connection
from memcore_qdrant.keywords import KEYWORD_VECTOR
from qdrant_client import QdrantClient

from memcore.errors import DimensionMismatchError, EmbedderMismatchError
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import VectorSpace


def _qdrant_answering(version: str) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/":
                self.send_error(404)
                return
            body = json.dumps({"title": "qdrant - vector search engine", "version": version, "commit": "x"})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def old_qdrant() -> Iterator[int]:
    server = _qdrant_answering("1.17.1")
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_older_than_the_plugin_needs_is_refused_at_open(old_qdrant: int) -> None:
    with pytest.raises(IncompatibleServerError, match=r"'1\.17\.1'.*1\.20 or newer"):
        QdrantServerStore.from_url(f"qdrant+http://127.0.0.1:{old_qdrant}?collection=notes")


@pytest.mark.parametrize(
    ("version", "accepted"),
    [
        ("1.20.0", True),
        ("1.21.3", True),
        ("2.0.0", True),
        ("1.19.9", False),
        ("1.2.0", False),
        ("dev", False),
    ],
)
def test_server_versions(version: str, accepted: bool) -> None:
    client = mock.Mock(spec=QdrantClient)
    client.info.return_value = SimpleNamespace(version=version)
    if accepted:
        assert check_server_version(client, "http://server:6333/memcore") == version
    else:
        with pytest.raises(IncompatibleServerError, match=r"1\.20"):
            check_server_version(client, "http://server:6333/memcore")
    assert MIN_SERVER_VERSION == (1, 20)


def _sharing(client: QdrantClient) -> QdrantServerStore:
    """A store over ``client``'s collection ``memcore``, as another process would open it."""
    engine = ClientEngine(client, "memcore", "http://server:6333/memcore", server=False)
    return QdrantServerStore(Connection(engine, threading.RLock(), lambda: None))


def _record(scope: Scope, content: str) -> MemoryRecord:
    return MemoryRecord(scope=scope, message=Message(role="user", content=content))


def test_a_client_sees_the_vector_another_client_added_after_it_opened() -> None:
    client = QdrantClient(":memory:")
    first, second = _sharing(client), _sharing(client)
    scope = Scope(tenant="acme")
    record = _record(scope, "hello")
    first.add([record], [[1.0, 0.0, 0.0]])
    assert second.dimension == 3
    assert [h.record.id for h in second.search(scope, vector=[1.0, 0.0, 0.0])] == [record.id]
    with pytest.raises(DimensionMismatchError):
        second.add([_record(scope, "4-d")], [[0.0, 1.0, 0.0, 0.0]])
    client.close()


def test_a_client_cannot_rebind_a_collection_another_client_bound() -> None:
    client = QdrantClient(":memory:")
    first, second = _sharing(client), _sharing(client)
    first.bind_vector_space(VectorSpace("minilm", 384))
    with pytest.raises(EmbedderMismatchError):
        second.bind_vector_space(VectorSpace("openai-3-small", 384))
    assert second.vector_space() == VectorSpace("minilm", 384)
    assert _sharing(client).vector_space() == VectorSpace("minilm", 384)
    client.close()


def test_the_engine_refuses_to_overwrite_a_binding_it_had_not_seen() -> None:
    client = QdrantClient(":memory:")
    first = ClientEngine(client, "memcore", "here", server=False)
    second = ClientEngine(client, "memcore", "here", server=False)
    assert first.load_space() is None and second.load_space() is None
    first.save_space(VectorSpace("minilm", 384))
    with pytest.raises(EmbedderMismatchError):
        second.save_space(VectorSpace("openai-3-small", 384))  # its cache still said "unbound"
    client.close()


UP_TO_DATE = {KEYWORDS_KEY: True, STORAGE_IDS_KEY: True}
"""The metadata of a collection in the current layout (opening it rewrites nothing)."""


def _collection(payload_schema: dict[str, Any]) -> SimpleNamespace:
    params = SimpleNamespace(vectors={}, sparse_vectors={KEYWORD_VECTOR: object()})
    return SimpleNamespace(
        config=SimpleNamespace(params=params, metadata=UP_TO_DATE), payload_schema=payload_schema
    )


def test_an_existing_collection_gets_the_indexes_it_lacks() -> None:
    """A crash between creating the collection and its indexes is repaired on the next open."""
    client = mock.Mock(spec=QdrantClient)
    client.collection_exists.return_value = True
    client.get_collection.return_value = _collection({fields.TENANT: object(), "role": object()})
    ClientEngine(client, "memcore", "http://server:6333/memcore", server=True)
    created = [call.args[1] for call in client.create_payload_index.call_args_list]
    expected = [name for name in fields.KEYWORD_FIELDS if name not in (fields.TENANT, "role")]
    assert created == [*expected, *fields.INTEGER_FIELDS]
    client.create_collection.assert_not_called()


def test_a_complete_collection_gets_no_index_requests() -> None:
    client = mock.Mock(spec=QdrantClient)
    client.collection_exists.return_value = True
    schema = dict.fromkeys([*fields.KEYWORD_FIELDS, *fields.INTEGER_FIELDS], object())
    client.get_collection.return_value = _collection(schema)
    ClientEngine(client, "memcore", "http://server:6333/memcore", server=True)
    client.create_payload_index.assert_not_called()


def _qdrant_1_20(requests: list[tuple[str, int]]) -> ThreadingHTTPServer:
    """A stub answering like Qdrant 1.20 the calls of opening a store and counting (always 7).

    It keeps connections alive (HTTP/1.1, as Qdrant does) and records each request with the
    client's source port, which tells one TCP connection from another.
    """
    indexes = {name: {"data_type": "keyword", "points": 0} for name in fields.KEYWORD_FIELDS}
    indexes.update({name: {"data_type": "integer", "points": 0} for name in fields.INTEGER_FIELDS})
    collection = {
        "status": "green",
        "optimizer_status": "ok",
        "segments_count": 1,
        "config": {
            "params": {"vectors": {}, "sparse_vectors": {KEYWORD_VECTOR: {}}},
            "hnsw_config": {"m": 16, "ef_construct": 100, "full_scan_threshold": 10000},
            "optimizer_config": {
                "deleted_threshold": 0.2,
                "vacuum_min_vector_number": 1000,
                "default_segment_number": 0,
                "flush_interval_sec": 5,
            },
            "wal_config": {"wal_capacity_mb": 32, "wal_segments_ahead": 0},
            "metadata": UP_TO_DATE,
        },
        "payload_schema": indexes,
    }
    answers: dict[str, Any] = {
        "GET /collections/memcore/exists": {"exists": True},
        "GET /collections/memcore": collection,
        "POST /collections/memcore/points/count": {"count": 7},
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            call = f"{self.command} {self.path.split('?')[0]}"
            requests.append((call, self.client_address[1]))
            if call == "GET /":
                answer: Any = {"title": "qdrant - vector search engine", "version": "1.20.0"}
            elif call in answers:
                answer = {"result": answers[call], "status": "ok", "time": 0.0}
            else:
                self.send_error(404)
                return
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    # Not 127.0.0.1: qdrant-client turns keep-alive off for "localhost" and "127.0.0.1" only.
    server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_server_store_reconnects_in_a_forked_child_and_leaves_the_parents_connection_alone() -> None:
    """The child gets a client of its own (a new TCP connection), and the inherited one is never
    closed or used there: the parent goes on over its own connection."""
    requests: list[tuple[str, int]] = []
    server = _qdrant_1_20(requests)
    scope = Scope(tenant="acme")
    try:
        store = QdrantServerStore.from_url(
            f"qdrant+http://127.0.0.2:{server.server_address[1]}?collection=memcore"
        )
        assert store.count(scope) == 7
        parent_ports = {port for _, port in requests}
        assert len(parent_ports) == 1, requests  # one kept-alive connection
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child
            try:
                inherited = store._engine._client  # type: ignore[attr-defined]
                counted = store.count(scope)
                fresh = store._engine._client is not inherited  # type: ignore[attr-defined]
                store.close()
                report = {"count": counted, "fresh": fresh, "inherited_closed": inherited._client.closed}
            except BaseException as exc:
                report = {"error": repr(exc)}
            os.write(write_end, json.dumps(report).encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            report = json.loads(pipe.read())
        os.waitpid(child, 0)
        assert report == {"count": 7, "fresh": True, "inherited_closed": False}
        call, child_port = requests[-1]
        assert call == "POST /collections/memcore/points/count"
        assert child_port not in parent_ports, "the child sent its request on the parent's connection"
        assert store.count(scope) == 7
        assert requests[-1][1] in parent_ports, "the parent's connection did not survive the child"
        store.close()
    finally:
        server.shutdown()
        server.server_close()
