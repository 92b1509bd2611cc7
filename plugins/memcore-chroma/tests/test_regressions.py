"""Regressions: concurrency and consistency bugs found in review, each reproduced here."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal
from uuid import uuid4

import pytest
from chroma_server import ChromaServer
from chromadb.api.models.Collection import Collection
from memcore_chroma import ChromaHttpStore, ChromaMemoryStore, ChromaStore, ExclusiveMaintenanceError, reads
from memcore_chroma.store import ChromaStoreBase
from memcore_chroma.urls import ServerAddress

from memcore.errors import DimensionMismatchError, InvalidInputError, StoreError, StoreUnavailableError
from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.store import VectorSpace
from memcore.testing.helpers import make_record, random_vectors

SCOPE = Scope(tenant="t")


def _moved(record: MemoryRecord, scope: Scope, content: str) -> MemoryRecord:
    message = record.message.model_copy(update={"content": content})
    return record.model_copy(update={"scope": scope, "message": message})


def _after_call(
    monkeypatch: pytest.MonkeyPatch, store: ChromaStoreBase, action: str, hook: Callable[[], None]
) -> None:
    """Run ``hook`` once, right after ``store`` made the Chroma call named ``action``."""
    original = ChromaStoreBase._call
    fired = []

    def call(self: ChromaStoreBase, what: str, operation: Callable[[Collection], Any]) -> Any:
        result = original(self, what, operation)
        if self is store and what == action and not fired:
            fired.append(what)
            hook()
        return result

    monkeypatch.setattr(ChromaStoreBase, "_call", call)


# -- 1. purge() on embedded Chroma while other threads use it ---------------------


def test_purge_while_another_thread_reads_keeps_the_database_intact(tmp_path: Path) -> None:
    root = tmp_path / "db"
    records = [make_record(SCOPE, f"r{i}") for i in range(2_000)]
    errors: list[BaseException] = []
    reads = [0]
    stop = threading.Event()
    with ChromaStore(root, collection="busy") as store:
        store.add(records, random_vectors(2_000, dim=8))

        def read() -> None:
            while not stop.is_set():
                try:
                    assert len(store.get(SCOPE, [records[0].id])) == 1
                    assert store.count(SCOPE) == 2_000
                    reads[0] += 1
                except BaseException as exc:
                    errors.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for _ in range(3):
                store.purge()
        finally:
            stop.set()
            reader.join()
        assert errors == []
        assert reads[0] > 0
        assert store.count(SCOPE) == 2_000
    with sqlite3.connect(root / "chroma.sqlite3") as database:
        assert database.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    with ChromaStore(root, collection="busy") as reopened:
        assert reopened.count(SCOPE) == 2_000
        assert reopened.search(SCOPE, vector=random_vectors(1, dim=8)[0], limit=1)


def test_purge_refreshes_every_store_on_the_client(tmp_path: Path) -> None:
    with ChromaStore(tmp_path, collection="one") as one, ChromaStore(tmp_path, collection="two") as two:
        one.add([make_record(SCOPE)], random_vectors(1))
        two.add([make_record(SCOPE)], random_vectors(1))
        one.purge()
        assert one.count(SCOPE) == 1
        assert two.count(SCOPE) == 1
        two.add([make_record(SCOPE)], random_vectors(1))
        assert two.count(SCOPE) == 2


# -- 2. rebuilding a collection on a server ----------------------------------------


@pytest.fixture
def server_store(
    chroma_server: ChromaServer, collection_name: str
) -> Iterator[Callable[..., ChromaHttpStore]]:
    address = ServerAddress("127.0.0.1", chroma_server.port, ssl=False)
    opened: list[ChromaHttpStore] = []

    def open_store(**options: Any) -> ChromaHttpStore:
        opened.append(ChromaHttpStore(address, collection=collection_name, **options))
        return opened[-1]

    yield open_store
    for store in opened:
        store.close()


def test_purge_on_a_server_is_refused_and_rebuild_exclusively_erases(
    server_store: Callable[..., ChromaHttpStore],
) -> None:
    store = server_store()
    records = [make_record(SCOPE, f"r{i}") for i in range(20)]
    store.add(records, random_vectors(20))
    with pytest.raises(ExclusiveMaintenanceError, match="rebuild_exclusively"):
        store.purge()
    assert isinstance(ExclusiveMaintenanceError("x"), StoreError)
    store.delete(SCOPE, [r.id for r in records[:5]])
    other = server_store()  # another client's handle moves to the rebuilt collection
    store.rebuild_exclusively()
    assert store.count(SCOPE) == 15
    assert other.count(SCOPE) == 15
    other.add([make_record(SCOPE)], random_vectors(1))
    assert store.count(SCOPE) == 16


def test_a_first_vector_after_stand_ins_on_a_server_is_refused_without_changes(
    server_store: Callable[..., ChromaHttpStore],
) -> None:
    store = server_store()
    plain = make_record(SCOPE, "plain")
    store.add([plain])
    with pytest.raises(ExclusiveMaintenanceError, match="dimension"):
        store.add([make_record(SCOPE, "vector")], random_vectors(1, dim=8))
    assert store.dimension is None
    assert store.list(SCOPE) == [plain]
    store.rebuild_exclusively(dimension=8)
    assert store.dimension == 8
    vector = make_record(SCOPE, "vector")
    store.add([vector], random_vectors(1, dim=8))
    hits = store.search(SCOPE, vector=random_vectors(1, dim=8)[0])
    assert [h.record.id for h in hits] == [vector.id]


def test_a_server_store_of_known_dimension_never_rebuilds(
    server_store: Callable[..., ChromaHttpStore],
) -> None:
    store = server_store(dimension=8)
    store.add([make_record(SCOPE, "plain")])
    store.add([make_record(SCOPE, "vector")], random_vectors(1, dim=8))
    bound = server_store()
    bound.bind_vector_space(VectorSpace("hash", 8))
    bound.add([make_record(SCOPE, "plain again")])
    assert store.count(SCOPE) == 3


def test_a_missing_tenant_or_database_says_so(chroma_server: ChromaServer) -> None:
    for address in (
        ServerAddress("127.0.0.1", chroma_server.port, ssl=False, tenant="nope"),
        ServerAddress("127.0.0.1", chroma_server.port, ssl=False, database="nodb"),
    ):
        with pytest.raises(StoreError, match=r"\?tenant= and \?database=") as caught:
            ChromaHttpStore(address)
        assert "disappeared" not in str(caught.value)


# -- 3. collection metadata shared by several stores -------------------------------


def test_two_stores_on_one_collection_see_each_others_metadata(tmp_path: Path) -> None:
    first = ChromaStore(tmp_path, collection="shared")
    second = ChromaStore(tmp_path, collection="shared")
    try:
        first.add([make_record(SCOPE, "first")], random_vectors(1, dim=8))
        first.bind_vector_space(VectorSpace("hash", 8))
        assert second.dimension == 8
        assert second.vector_space() == VectorSpace("hash", 8)
        with pytest.raises(DimensionMismatchError):
            second.add([make_record(SCOPE)], random_vectors(1, dim=16))
        second.add([make_record(SCOPE, "without a vector")])
    finally:
        first.close()
        second.close()
    with ChromaStore(tmp_path, collection="shared") as reopened:
        assert reopened.vector_space() == VectorSpace("hash", 8)
        assert reopened.count(SCOPE) == 2
        reopened.add([make_record(SCOPE)], random_vectors(1, dim=8))


def test_a_stale_store_cannot_overwrite_the_binding(tmp_path: Path) -> None:
    first = ChromaStore(tmp_path, collection="bound")
    second = ChromaStore(tmp_path, collection="bound")
    try:
        first.bind_vector_space(VectorSpace("hash", 8))
        second._meta = {k: v for k, v in second._meta.items() if not k.startswith("memcore.e")}
        with pytest.raises(InvalidInputError):
            second.bind_vector_space(VectorSpace("other", 8))
        assert first.vector_space() == VectorSpace("hash", 8)
    finally:
        first.close()
        second.close()


def test_a_failed_add_changes_no_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    with ChromaMemoryStore() as store:

        def refuse(self: Collection, **_: Any) -> None:
            raise ConnectionError("connection refused")

        monkeypatch.setattr(Collection, "upsert", refuse)
        with pytest.raises(StoreUnavailableError):
            store.add([make_record(SCOPE)], random_vectors(1, dim=8))
        monkeypatch.undo()
        assert store.dimension is None
        store.add([make_record(SCOPE)], random_vectors(1, dim=4))
        assert store.dimension == 4


# -- 4, 5. reads and deletes that another writer races --------------------------


NOT_EXACT = {"metadata.n": {"$lt": 2**60}}


@pytest.mark.parametrize(
    ("between", "limit", "filter_spec", "order"),
    [
        ("listing ids", 10, None, "asc"),  # few matches: ids, then the records
        ("sampling times", 1, None, "asc"),  # more than 2 x limit: ids, their times, the records
        ("listing records", 10, NOT_EXACT, "asc"),  # not exact: metadata, then records
        # the shortcuts (memcore_chroma.shortcuts): a filter across scopes, ids then records
        ("listing selected entries", 10, NOT_EXACT, "asc"),
        # a window from the collection's tail: ids, their metadata, then the bound's records
        ("listing the newest entries", 1, None, "desc"),
        ("sampling the newest entries", 1, None, "desc"),
    ],
)
def test_list_with_a_limit_never_returns_a_record_moved_to_another_scope(
    monkeypatch: pytest.MonkeyPatch,
    between: str,
    limit: int,
    filter_spec: dict[str, Any] | None,
    order: Literal["asc", "desc"],
) -> None:
    a, b = Scope(tenant="a"), Scope(tenant="b")
    if between == "listing records":
        monkeypatch.setattr(reads, "SMALL_SELECTION", 0)  # no shortcut across scopes
    with ChromaMemoryStore() as store:
        mine, gone = make_record(a, "mine", minute=1), make_record(a, "deleted", minute=2)
        mine, gone = (r.model_copy(update={"metadata": {"n": 1}}) for r in (mine, gone))
        old = make_record(a, "old", minute=0)
        store.add([mine, gone, old])

        def race() -> None:  # between list's first reads and its document read
            monkeypatch.undo()
            store.delete(a, [mine.id, gone.id])
            store.add([_moved(mine, b, "tenant b's secret")])

        _after_call(monkeypatch, store, between, race)
        listed = store.list(a, filter=filter_spec, limit=limit, order=order)
        assert store.list(b), "the race did not run"
        assert listed == ([] if filter_spec else [old])


def test_delete_never_removes_a_record_moved_to_another_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = Scope(tenant="a"), Scope(tenant="b")
    with ChromaMemoryStore() as store:
        record = make_record(a, "a's")
        store.add([record])
        moved = _moved(record, b, "b's")
        # A server's delete may not count, so the ids are looked up first (as here, forced).
        monkeypatch.setattr(store._connection, "counts_deletes", False)

        def race() -> None:  # between delete's scoped lookup and the delete itself
            store.delete(a, [record.id])
            store.add([moved])

        _after_call(monkeypatch, store, "finding records", race)
        store.delete(a, [record.id])
        monkeypatch.undo()
        assert store.get(b, [record.id]) == [moved]


def test_a_delete_chroma_counts_itself_reports_only_what_the_scope_held() -> None:
    a, b = Scope(tenant="a"), Scope(tenant="b")
    with ChromaMemoryStore() as store:
        assert store._connection.counts_deletes
        mine, theirs = make_record(a, "a's"), make_record(b, "b's")
        store.add([mine, theirs])
        assert store.delete(a, [mine.id, theirs.id, mine.id, uuid4()]) == 1
        assert store.get(b, [theirs.id]) == [theirs]
        assert store.delete(a, [mine.id]) == 0


# -- 6. binding a dimension after records without vectors -------------------------


def test_search_after_stand_ins_and_a_binding_finds_nothing() -> None:
    with ChromaMemoryStore() as store:
        store.add([make_record(SCOPE, "plain")])
        store.bind_vector_space(VectorSpace("hash", 8))
        assert store.search(SCOPE, vector=random_vectors(1, dim=8)[0]) == []
        assert store.search(SCOPE, vector=random_vectors(1, dim=8)[0], text="plain") == []
        vector = make_record(SCOPE, "vector")
        store.add([vector], random_vectors(1, dim=8))
        assert [h.record.id for h in store.search(SCOPE, vector=random_vectors(1, dim=8)[0])] == [vector.id]


# -- 7. an interrupted rebuild ---------------------------------------------------


def test_an_interrupted_rebuild_recovers_without_reopening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Collection.modify

    def rename_fails(self: Collection, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("name") == "col1":
            raise ConnectionError("connection refused")
        original(self, *args, **kwargs)

    with ChromaStore(tmp_path, collection="col1") as store:
        store.add([make_record(SCOPE, f"r{i}") for i in range(10)], random_vectors(10))
        monkeypatch.setattr(Collection, "modify", rename_fails)
        with pytest.raises(StoreUnavailableError):
            store.purge()
        monkeypatch.undo()
        assert store.count(SCOPE) == 10
        store.add([make_record(SCOPE)])
        assert store.count(SCOPE) == 11


# -- 8. collection names ---------------------------------------------------------


@pytest.mark.parametrize("name", ["a..b", "127.0.0.1", "a" * 505])
def test_names_chroma_refuses_are_invalid_input(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidInputError, match="collection name"):
        ChromaStore(tmp_path, collection=name)
