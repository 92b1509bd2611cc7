"""The record lifecycle in Chroma's own terms: the live condition in every read's ``where``, an
update racing another client's delete, and ``scopes()`` reading no documents or vectors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from memcore_chroma import reads
from memcore_chroma.calls import CollectionCall
from memcore_chroma.encoding import EXPIRES_AT_KEY
from memcore_chroma.store import ChromaStoreBase

from memcore.errors import StoreError
from memcore.scope import Scope
from memcore.sessions import run_session
from memcore.testing import ManualClock
from memcore.testing.helpers import make_record, random_vectors

OWNER = Scope(tenant="t", user_id="u")


def _clauses(where: Any) -> Iterator[dict[str, Any]]:
    if isinstance(where, dict):
        yield where
        for value in where.values():
            if isinstance(value, list):
                for clause in value:
                    yield from _clauses(clause)


def _is_live(call: CollectionCall) -> bool:
    """Whether the call's ``where`` has the live condition as one of its ``$and`` clauses."""
    return any(
        set(clause.get(EXPIRES_AT_KEY, {})) == {"$gt"} for clause in _clauses(call.kwargs.get("where"))
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


def test_every_read_asks_chroma_for_live_records_and_no_delete_does(
    open_store: Callable[[], ChromaStoreBase], calls: list[CollectionCall]
) -> None:
    records = [make_record(OWNER, f"apple {i}", minute=i, metadata={"n": i}) for i in range(6)]
    vectors = random_vectors(len(records), seed=2)
    with open_store() as store:
        store.clock = ManualClock()
        store.add(records, vectors)
        reads: list[Callable[[], object]] = [
            lambda: store.get(OWNER, [records[0].id]),
            lambda: store.vectors(OWNER, [records[0].id]),
            lambda: store.list(OWNER),
            lambda: store.list(OWNER, order="desc", limit=2),
            lambda: store.list(OWNER, filter={"$or": [{"metadata.n": i} for i in range(300)]}, limit=2),
            lambda: store.count(OWNER, filter={"metadata.n": {"$gte": 2}}),
            lambda: store.search(OWNER, vector=vectors[0], limit=3),
            lambda: store.search(OWNER, text="APPLE", limit=3),
            lambda: store.search(OWNER, keywords="apple", limit=3),
            lambda: store.scopes(OWNER),
        ]
        for read in reads:
            calls.clear()
            read()
            asked = [c for c in calls if c.method in ("get", "query") and c.action != "sampling times"]
            assert asked and all(_is_live(c) for c in asked), [c.kwargs.get("where") for c in calls]
        calls.clear()
        store.delete(OWNER, [records[0].id])
        store.delete_where(OWNER, {"metadata.n": 1})
        store.sweep()
        assert calls and not any(_is_live(c) for c in calls)


def test_scopes_reads_no_documents_and_no_vectors(
    open_store: Callable[[], ChromaStoreBase], calls: list[CollectionCall]
) -> None:
    with open_store() as store:
        store.add([make_record(OWNER.model_copy(update={"session_id": f"s{i % 3}"})) for i in range(9)])
        calls.clear()
        assert [e.count for e in store.scopes(OWNER)] == [3, 3, 3]
        assert {tuple(c.kwargs["include"]) for c in calls} == {(), ("metadatas",)}


def test_an_update_whose_record_another_client_deletes_before_the_write_does_not_bring_it_back(
    open_store: Callable[[], ChromaStoreBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window a server leaves between processes: the check found the record, another client
    deleted it, then the write came. Chroma's ``update`` skips an id that no longer exists."""
    record = make_record(OWNER, "v1")
    with open_store() as store, open_store() as other:  # on a server, two clients
        store.add([record], random_vectors(1))
        write = store._write_session

        def deleted_first(*args: Any) -> Any:
            assert other.delete(OWNER, [record.id]) == 1
            return (yield from write(*args))

        monkeypatch.setattr(store, "_write_session", deleted_first)
        updated = store.update(OWNER, record.id, content="v2")  # linearised before the delete
        assert updated.message.content == "v2"
        assert store.get(OWNER, [record.id]) == [] == other.get(OWNER, [record.id])
        assert store.count(OWNER) == 0


def test_a_read_that_lost_an_entry_to_another_write_is_asked_again() -> None:
    """A Chroma server reading embeddings with metadata while a delete lands raised "Error finding
    id" (about 1 read in 15 in a tight loop): ``update``, which keeps the record's vector, failed;
    a search racing upserts did too, more rarely."""
    answers: list[Any] = [
        StoreError("Chroma failed while reading vectors: InternalError: Error finding id"),
        {"ids": []},
    ]

    def make(call: CollectionCall) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def read() -> Any:
        session = reads.asked_again_if_an_entry_vanished("reading", "get", include=["embeddings"])
        return run_session(session, make)

    assert read() == {"ids": []}
    answers[:] = [StoreError("Chroma failed: disk I/O error"), {"ids": []}]
    with pytest.raises(StoreError, match="disk"):
        read()


def test_replace_writes_only_over_the_version_it_was_given(open_store: Callable[[], ChromaStoreBase]) -> None:
    """``_replace`` is a compare-and-swap: a version read before another update is not written back."""
    record = make_record(OWNER, "v1", metadata={"a": 1})
    with open_store() as store:
        store.add([record], random_vectors(1))
        changed = store.update(OWNER, record.id, metadata={"b": 2})
        stale = record.model_copy(update={"metadata": {"a": 1, "c": 3}})
        assert not store._replace(record, stale, None)
        assert store.get(OWNER, [record.id]) == [changed]
        assert store._replace(changed, stale, None)
        assert store.get(OWNER, [record.id]) == [stale]
