"""``?ef_search=``: the HNSW setting a Chroma store's URL may change, kept by the collection."""

from __future__ import annotations

from pathlib import Path

import chromadb
import numpy as np
import pytest
from chroma_server import ChromaServer
from conftest import drop_collection
from memcore_chroma import ChromaHttpStore, ChromaStore, connection
from memcore_chroma.opening import MAX_EF_SEARCH, ef_search_of
from memcore_chroma.plugin import memcore_bench_raw_client
from memcore_chroma.urls import ServerAddress, ef_search_param, embedded_path, server_address

from memcore.errors import InvalidInputError
from memcore.scope import Scope
from memcore.testing.helpers import make_record

SCOPE = Scope(tenant="t")


def _ef_search(chroma: connection.Connection, collection: str = "memcore") -> int | None:
    try:
        return ef_search_of(chroma.client.get_collection(collection, embedding_function=None))
    finally:
        chroma.release()


def _unit(rows: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((rows, 384)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _recall(store: ChromaStore, ids: list[str], vectors: np.ndarray, queries: np.ndarray) -> float:
    found = 0
    for query in queries:
        exact = {ids[i] for i in np.argsort(-(vectors @ query))[:10]}
        found += len(exact & {str(h.record.id) for h in store.search(SCOPE, vector=query, limit=10)})
    return found / (10 * len(queries))


def test_the_parameter_is_parsed_and_checked(tmp_path: Path) -> None:
    assert ef_search_param(embedded_path("chroma:///db?ef_search=250")[1]) == 250
    assert ef_search_param(server_address("chroma+http://h?ef_search=7")[1]) == 7
    assert ef_search_param(embedded_path("chroma:///db")[1]) is None
    for bad in ("0", "-5", "abc", "1e3", "²", "", "9" * 40):
        with pytest.raises(InvalidInputError, match="ef_search"):
            ChromaStore.from_url(f"chroma://{tmp_path}/db?ef_search={bad}")
    for wrong in (0, MAX_EF_SEARCH + 1, True, 2.5, "100"):
        with pytest.raises(InvalidInputError, match="ef_search"):
            ChromaStore(tmp_path / "db", ef_search=wrong)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="ef_search"):
            ChromaHttpStore(ServerAddress("127.0.0.1", 1, ssl=False), ef_search=wrong)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="ef_search"):
        memcore_bench_raw_client(f"chroma://{tmp_path}/raw?ef_search={MAX_EF_SEARCH + 1}")
    assert list(tmp_path.iterdir()) == []  # refused before anything was made


def test_a_refused_value_leaves_the_collection_as_it_was(tmp_path: Path) -> None:
    with ChromaStore(tmp_path / "db", ef_search=300) as store:
        store.add([make_record(SCOPE, "kept")], _unit(1, 0))
    with pytest.raises(InvalidInputError):
        ChromaStore.from_url(f"chroma://{tmp_path}/db?ef_search={MAX_EF_SEARCH + 1}")
    with ChromaStore(tmp_path / "db") as store:
        assert _ef_search(connection.persistent(tmp_path / "db")) == 300
        assert [r.message.content for r in store.list(SCOPE)] == ["kept"]


def test_the_setting_is_kept_by_the_collection_through_reopen_and_purge(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with ChromaStore.from_url(f"chroma://{path}?ef_search=250") as store:
        records = [make_record(SCOPE, f"r{i}", minute=i) for i in range(3)]
        store.add(records, _unit(3, 1))
        store.delete(SCOPE, [records[0].id])
        store.purge()  # a rebuild: a fresh collection takes the old one's place
        assert _ef_search(connection.persistent(path)) == 250
    with ChromaStore(path) as reopened:  # no parameter: the collection's setting stays
        assert _ef_search(connection.persistent(path)) == 250
        assert len(reopened.list(SCOPE)) == 2
    with ChromaStore(path, ef_search=120):
        assert _ef_search(connection.persistent(path)) == 120


def test_a_changed_setting_takes_effect_in_this_process_at_once(tmp_path: Path) -> None:
    """Chroma applies ef_search when it loads an index; the store restarts its client so that the
    index this process already loaded is searched with the new value."""
    path = tmp_path / "db"
    vectors, queries = _unit(3_000, 2), _unit(20, 3)
    with ChromaStore(path, ef_search=10) as narrow:
        records = [make_record(SCOPE, f"r{i}") for i in range(len(vectors))]
        narrow.add(records, vectors)
        ids = [str(r.id) for r in records]
        before = _recall(narrow, ids, vectors, queries)  # the index is loaded now
        with ChromaStore(path, ef_search=500) as wide:
            after = _recall(wide, ids, vectors, queries)
            assert _recall(narrow, ids, vectors, queries) == after  # one collection, one setting
    assert before < 0.8
    assert after >= 0.95


def test_the_raw_baseline_uses_the_same_setting(tmp_path: Path) -> None:
    raw = memcore_bench_raw_client(f"chroma://{tmp_path}/raw?ef_search=333")
    assert raw is not None
    raw.close()
    client = chromadb.PersistentClient(path=str(tmp_path / "raw"), settings=connection.client_settings())
    try:
        assert ef_search_of(client.get_collection("bench", embedding_function=None)) == 333
    finally:
        client.close()  # type: ignore[attr-defined]  # on chromadb's Client, not on ClientAPI


def test_a_server_collection_gets_the_setting(chroma_server: ChromaServer, collection_name: str) -> None:
    url = f"{chroma_server.url}?collection={collection_name}"
    server = connection.http("127.0.0.1", chroma_server.port, False, "default_tenant", "default_database")
    try:
        with ChromaHttpStore.from_url(f"{url}&ef_search=222"):
            assert ef_search_of(server.client.get_collection(collection_name, embedding_function=None)) == 222
        with ChromaHttpStore.from_url(f"{url}&ef_search=444"):  # applied when the server next loads it
            assert ef_search_of(server.client.get_collection(collection_name, embedding_function=None)) == 444
        with ChromaHttpStore.from_url(url):
            assert ef_search_of(server.client.get_collection(collection_name, embedding_function=None)) == 444
    finally:
        drop_collection(server, collection_name)
