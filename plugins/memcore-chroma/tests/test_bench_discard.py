"""``memcore bench`` leaves no collection behind on a Chroma server (``?collection={name}``)."""

from __future__ import annotations

from chroma_server import ChromaServer
from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT
from memcore_chroma import connection

from memcore.bench.workloads import opened
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope


def _bench_collections(server: ChromaServer) -> list[str]:
    chroma = connection.http("127.0.0.1", server.port, False, DEFAULT_TENANT, DEFAULT_DATABASE)
    try:
        return [c.name for c in chroma.client.list_collections() if c.name.startswith("memcore_bench_")]
    finally:
        chroma.release()


def test_a_fresh_collection_is_dropped_after_the_run(chroma_server: ChromaServer) -> None:
    before = _bench_collections(chroma_server)
    with opened(chroma_server.url + "?collection={name}") as store:
        store.add(
            [MemoryRecord(scope=Scope(tenant="t"), message=Message(role="user", content="hi"))], [[1.0, 0.0]]
        )
        made = set(_bench_collections(chroma_server)) - set(before)
        assert len(made) == 1
    assert _bench_collections(chroma_server) == before


def test_only_the_named_collection_is_dropped(chroma_server: ChromaServer) -> None:
    from memcore_chroma.plugin import memcore_bench_discard

    assert memcore_bench_discard(chroma_server.url + "?collection=theirs", "memcore_bench_x") is False
    assert memcore_bench_discard(chroma_server.url, "memcore_bench_x") is False  # the default collection
    gone = "memcore_bench_0123456789ab"
    assert memcore_bench_discard(chroma_server.url + f"?collection={gone}", gone) is True  # already gone


def test_no_discard_for_embedded_stores() -> None:
    from memcore_chroma.plugin import memcore_bench_discard

    assert memcore_bench_discard("chroma:///tmp/x?collection=c", "c") is None
