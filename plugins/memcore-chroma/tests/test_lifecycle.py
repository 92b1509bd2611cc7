"""The record lifecycle in Chroma's own terms: the live condition checked on what reads decode (and
sent by counts), stand-ins, an update racing another client's delete, and ``scopes()`` reading no
documents or vectors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from memcore_chroma import reads
from memcore_chroma.calls import CollectionCall
from memcore_chroma.encoding import EXPIRES_AT_KEY, VECTOR_KEY
from memcore_chroma.opening import META_STAND_INS
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


@pytest.mark.parametrize("small_selection", [0, reads.SMALL_SELECTION], ids=["hnsw", "exact"])
def test_reads_check_expiry_on_what_they_decode_and_only_counts_ask_chroma(
    open_store: Callable[[], ChromaStoreBase],
    calls: list[CollectionCall],
    small_selection: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chroma evaluates every clause of a ``where`` over every entry the clause matches: the live
    condition matches nearly all of them, a scan of the collection. Reads that decode records check
    it on each record instead; counts and ``scopes()``, which decode nothing, still send it. The
    newest records (inserted last) have expired, so a window's time bound first finds only them."""
    monkeypatch.setattr(reads, "SMALL_SELECTION", small_selection)
    clock = ManualClock()
    kept = [make_record(OWNER, f"apple {i}", minute=i, metadata={"n": i}) for i in range(8)]
    gone = [make_record(OWNER, f"apple late {i}", minute=100 + i, metadata={"n": i}) for i in range(6)]
    with open_store() as store:
        store.clock = clock
        store.add(kept, random_vectors(len(kept), seed=2))
        store.add(gone, random_vectors(len(gone), seed=3), ttl=60)
        clock.advance(120)
        ids = [kept[0].id, gone[0].id]
        vector = random_vectors(1, seed=3)[0]  # gone[0]'s vector: the nearest entry has expired
        newest = [kept[7], kept[6]]
        checks: list[tuple[Callable[[], object], object]] = [
            (lambda: store.get(OWNER, ids), [kept[0]]),
            (lambda: store.get(OWNER.exact(), ids), [kept[0]]),
            (lambda: list(store.vectors(OWNER, ids)), [kept[0].id]),
            (lambda: list(store.vectors(OWNER.exact(), ids)), [kept[0].id]),
            (lambda: store.list(OWNER), kept),
            (lambda: store.list(OWNER, order="desc", limit=2), newest),
            (lambda: store.list(OWNER.exact(), order="desc", limit=2), newest),
            (
                lambda: store.list(OWNER, filter={"$or": [{"metadata.n": i} for i in range(300)]}, limit=2),
                kept[:2],
            ),
            (
                lambda: {h.record.id for h in store.search(OWNER, vector=vector, limit=8)},
                {r.id for r in kept},
            ),
            (lambda: store.search(OWNER, text="LATE", limit=3), []),
            (lambda: store.search(OWNER, keywords="late", limit=3), []),
        ]
        for read, expected in checks:
            calls.clear()
            assert read() == expected
            sent = [c.kwargs.get("where") for c in calls if c.method in ("get", "query")]
            assert sent and not any(_is_live(c) for c in calls), sent
            assert not any(clause == {VECTOR_KEY: True} for w in sent for clause in _clauses(w)), sent
        for count, expected in [(lambda: store.count(OWNER), 8), (lambda: store.scopes(OWNER)[0].count, 8)]:
            calls.clear()
            assert count() == expected
            assert all(_is_live(c) for c in calls if c.method == "get")
        calls.clear()
        store.delete(OWNER, [kept[0].id])
        store.delete(OWNER.exact(), [kept[1].id])
        store.delete_where(OWNER, {"metadata.n": 2})
        store.sweep()
        assert calls and not any(_is_live(c) for c in calls)
        assert store.list(OWNER) == kept[3:]


@pytest.mark.parametrize("small_selection", [0, reads.SMALL_SELECTION], ids=["hnsw", "exact"])
def test_searches_skip_stand_ins_even_when_the_collection_says_it_holds_none(
    open_store: Callable[[], ChromaStoreBase],
    calls: list[CollectionCall],
    small_selection: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stand-in vectors (records without one) are excluded by ``vec: true`` only where the
    collection's metadata says it may hold them; each hit is checked anyway, so a copy of the
    metadata from before another client wrote the first stand-in costs time, not results."""
    monkeypatch.setattr(reads, "SMALL_SELECTION", small_selection)
    with open_store() as store:
        store.add([make_record(OWNER, "with", minute=0)], random_vectors(1, seed=1))
        assert store._fresh_meta()[META_STAND_INS] is False
        stand_ins = [make_record(OWNER, f"without {i}", minute=i + 1) for i in range(30)]
        store.add(stand_ins)
        assert store._fresh_meta()[META_STAND_INS] is True
        calls.clear()
        query = np.zeros(8, dtype=np.float32)
        query[0] = 1.0  # the stand-ins' own vector: they rank first unless excluded
        assert [h.record.message.content for h in store.search(OWNER, vector=query, limit=5)] == ["with"]
        assert any(clause == {VECTOR_KEY: True} for c in calls for clause in _clauses(c.kwargs.get("where")))
        store._meta[META_STAND_INS] = False  # as if read before the stand-ins were written
        assert [h.record.message.content for h in store.search(OWNER, vector=query, limit=5)] == ["with"]


def test_a_collection_written_before_the_stand_in_key_gets_it_at_open(
    open_store: Callable[[], ChromaStoreBase],
) -> None:
    with open_store() as store:
        store.add([make_record(OWNER, "without")])

        def as_before(collection: Any) -> None:
            collection.modify(
                metadata={k: v for k, v in (collection.metadata or {}).items() if k != META_STAND_INS}
            )

        store._call("removing the key", as_before)
        assert META_STAND_INS not in store._fresh_meta()
    with open_store() as reopened:
        assert reopened._fresh_meta()[META_STAND_INS] is True


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
