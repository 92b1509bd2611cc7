"""A record is its exact scope plus its id: how entries are named, and how formats 1 and 2 are migrated."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from chromadb.api.models.Collection import Collection
from memcore_chroma import ChromaMemoryStore
from memcore_chroma import opening as opening_module
from memcore_chroma import store as store_module
from memcore_chroma.encoding import EXPIRES_AT_KEY, RECORD_ID_KEY, entry_id
from memcore_chroma.opening import (
    FORMAT,
    FORMAT_1,
    FORMAT_2,
    META_FORMAT,
    NEVER_EXPIRES_MICROS,
    backfill_expiry,
)
from memcore_chroma.rebuild import PAGE_SIZE
from memcore_chroma.store import ChromaStoreBase

from memcore.errors import AmbiguousIdError
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope, storage_id
from memcore.testing import ManualClock
from memcore.testing.helpers import make_record, random_vectors

OWNER, OTHER = Scope(tenant="t", user_id="u"), Scope(tenant="t", user_id="v")


def _entries(store: ChromaStoreBase) -> dict[str, dict[str, Any]]:
    """Every entry of the store's collection: its Chroma id and its metadata."""
    found = store._call("reading every entry", lambda c: c.get(include=["metadatas"]))
    return {i: dict(meta) for i, meta in zip(found["ids"], found["metadatas"] or [], strict=True)}


def _twin(record: MemoryRecord, scope: Scope, content: str) -> MemoryRecord:
    return record.model_copy(update={"scope": scope, "message": Message(role="user", content=content)})


def test_entries_are_named_by_scope_and_id_and_keep_the_record_id(
    open_store: Callable[[], ChromaStoreBase],
) -> None:
    mine = make_record(OWNER, "mine", minute=1)
    theirs, fresh = _twin(mine, OTHER, "theirs"), make_record(OTHER, "fresh", minute=2)
    with open_store() as store:
        store.add([mine], random_vectors(1, seed=1))
        store.add([fresh, theirs], random_vectors(2, seed=2))  # one batch: no record blocks another
        entries = _entries(store)
        assert set(entries) == {str(storage_id(r.scope, r.id)) for r in (mine, theirs, fresh)}
        assert {meta[RECORD_ID_KEY] for meta in entries.values()} == {str(mine.id), str(fresh.id)}
        assert store.get(OWNER, [mine.id]) == [mine]
        assert store.get(Scope(tenant="t"), [mine.id]) == [mine, theirs]
        assert set(store.vectors(OTHER, [mine.id, fresh.id])) == {mine.id, fresh.id}
        with pytest.raises(AmbiguousIdError):
            store.vectors(Scope(tenant="t"), [mine.id])
        assert store.delete(Scope(tenant="t"), [mine.id]) == 2
        assert store.get(Scope(tenant="t"), [mine.id, fresh.id]) == [fresh]


def test_reads_and_deletes_by_more_ids_than_a_page() -> None:
    records = [make_record(OWNER, f"r{i}") for i in range(PAGE_SIZE + 200)]
    ids = [r.id for r in records]
    with ChromaMemoryStore() as store:
        store.add(records, random_vectors(len(records)))
        assert store.get(OWNER, ids) == records
        assert len(store.vectors(OWNER, ids)) == len(records)
        assert store.delete(Scope(tenant="t"), ids) == len(records)
        assert store.count(OWNER) == 0


def _as_format_1(collection: Collection, interrupted: MemoryRecord) -> None:
    """Rewrite the collection as memcore-chroma's format 1 left it: entries named by their record's
    id, without the record-id key. ``interrupted`` keeps its new entry too, as a migration that
    stopped between writing an entry anew and deleting the old one leaves it."""
    found = collection.get(include=["embeddings", "documents", "metadatas"])
    metadatas = [dict(meta) for meta in found["metadatas"] or []]
    record_ids = [str(meta.pop(RECORD_ID_KEY)) for meta in metadatas]
    for meta in metadatas:
        del meta[EXPIRES_AT_KEY]  # no record could expire before format 3
    collection.delete(ids=[i for i in found["ids"] if i != entry_id(interrupted)])
    collection.update(ids=[entry_id(interrupted)], metadatas=[{EXPIRES_AT_KEY: None}])
    collection.add(
        ids=record_ids,
        embeddings=np.asarray(found["embeddings"], dtype=np.float32),
        documents=found["documents"],
        metadatas=metadatas,  # type: ignore[arg-type]
    )
    collection.modify(metadata={**(collection.metadata or {}), META_FORMAT: FORMAT_1})


def test_a_format_1_collection_is_migrated_at_open(
    open_store: Callable[[], ChromaStoreBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    wide = Scope(tenant="t")
    records = [make_record(OWNER, f"owner {i}", minute=i, metadata={"n": i}) for i in range(4)]
    records += [make_record(OTHER, "other", minute=9)]
    plain = make_record(OWNER.model_copy(update={"session_id": "s"}), "no vector", minute=5)
    vectors = random_vectors(len(records), seed=4)
    with open_store() as store:
        store.add(records, vectors)
        store.add([plain])
        store._call("making the collection format 1", lambda c: _as_format_1(c, records[0]))
        assert str(records[1].id) in _entries(store)
    everything = [*records, plain]
    with open_store() as reopened:
        moved = {i: meta[RECORD_ID_KEY] for i, meta in _entries(reopened).items()}
        assert moved == {entry_id(r): str(r.id) for r in everything}, "old entries gone, each moved once"
        assert reopened._fresh_meta()[META_FORMAT] == FORMAT
        assert all(meta[EXPIRES_AT_KEY] == NEVER_EXPIRES_MICROS for meta in _entries(reopened).values())
        assert reopened.get(wide, [r.id for r in everything]) == everything
        assert reopened.list(OWNER, filter={"metadata.n": {"$gte": 2}}) == records[2:4]
        assert reopened.count(OWNER) == 5
        assert reopened.search(OWNER, vector=vectors[3], limit=1)[0].record == records[3]
        vectors_back = reopened.vectors(wide, [r.id for r in everything])
        assert set(vectors_back) == {r.id for r in records}
        expected = vectors[1] / np.linalg.norm(vectors[1])
        assert np.allclose(vectors_back[records[1].id], expected, atol=1e-5)
        twin = _twin(records[1], OTHER, "twin")
        reopened.add([twin], random_vectors(1, seed=5))
        assert reopened.get(wide, [records[1].id]) == [records[1], twin]
        assert reopened.delete(OWNER, [records[1].id, plain.id]) == 2
        assert reopened.get(wide, [records[1].id, plain.id]) == [twin]
    monkeypatch.setattr(store_module, "migrate", None)  # the format says it is done
    with open_store() as again:
        assert again.count(wide) == 5


def _plant_format_1(collection: Collection, records: list[MemoryRecord]) -> None:
    """Rewrite the collection as format 1, its entries in the order of ``records``."""
    found = collection.get(include=["embeddings", "documents", "metadatas"])
    by_record = {}
    for i, document, meta, vector in zip(
        found["ids"], found["documents"] or [], found["metadatas"] or [], found["embeddings"], strict=True
    ):
        meta = dict(meta)
        del meta[EXPIRES_AT_KEY]
        by_record[str(meta.pop(RECORD_ID_KEY))] = (i, document, meta, vector)
    collection.delete(ids=found["ids"])
    for record in records:
        _, document, meta, vector = by_record[str(record.id)]
        collection.add(
            ids=[str(record.id)],
            embeddings=np.asarray([vector], dtype=np.float32),
            documents=[document],
            metadatas=[meta],  # type: ignore[list-item]
        )
    collection.modify(metadata={**(collection.metadata or {}), META_FORMAT: FORMAT_1})


@pytest.mark.parametrize("page", [1, 1_000], ids=["pages-of-one", "one-page"])
@pytest.mark.parametrize("planted_first", [True, False], ids=["planted-first", "planted-last"])
def test_a_format_1_entry_on_anothers_new_id_neither_deletes_nor_taints_it(
    open_store: Callable[[], ChromaStoreBase],
    monkeypatch: pytest.MonkeyPatch,
    page: int,
    planted_first: bool,
) -> None:
    alice = make_record(OWNER, "alice's plan", minute=1, metadata={"n": 1})
    # bob chose his record's id: alice's record's format-2 entry id; a third record sits on bob's.
    bob = make_record(OTHER, "bob's plant", minute=2, metadata={"n": 2, "planted": True})
    bob = bob.model_copy(update={"id": storage_id(alice.scope, alice.id)})
    carol_scope = Scope(tenant="t", user_id="w")
    carol = make_record(carol_scope, "carol's plant", minute=3, metadata={"planted": True})
    carol = carol.model_copy(update={"id": storage_id(bob.scope, bob.id)})
    records = [alice, bob, carol]
    monkeypatch.setattr(opening_module, "BACKFILL_PAGE", page)
    with open_store() as store:
        store.add(records, random_vectors(3, seed=6))
        order = [carol, bob, alice] if planted_first else records
        store._call("planting format 1", lambda c: _plant_format_1(c, order))
    with open_store() as reopened:
        wide = Scope(tenant="t")
        assert reopened.get(OWNER, [alice.id]) == [alice]
        assert reopened.get(wide, [r.id for r in records]) == sorted(records, key=lambda r: r.created_at)
        assert reopened.list(OWNER, filter={"metadata.planted": True}) == [], "no metadata merged in"
        assert reopened.list(wide, filter={"metadata.planted": True}) == [bob, carol]
        entries = _entries(reopened)
        assert set(entries) == {entry_id(r) for r in records}
        assert all(RECORD_ID_KEY in meta for meta in entries.values())


def test_a_format_2_collection_gets_expires_at_at_open_and_its_records_never_expire(
    open_store: Callable[[], ChromaStoreBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Format 2 had no ``expires_at``, and a ``where`` on a key an entry lacks never matches it:
    unmigrated, its records would be hidden by the live condition. One entry keeps the key, as a
    backfill that stopped half-way (the format is written only once it is done) leaves it."""
    records = [make_record(OWNER, f"old {i}", minute=i, metadata={"n": i}) for i in range(5)]
    vectors = random_vectors(len(records), seed=7)
    monkeypatch.setattr(opening_module, "BACKFILL_PAGE", 2)  # several pages
    with open_store() as store:
        store.add(records, vectors)

        def as_format_2(collection: Collection) -> None:
            stripped = [entry_id(r) for r in records[1:]]
            collection.update(ids=stripped, metadatas=[{EXPIRES_AT_KEY: None}] * len(stripped))
            collection.modify(metadata={**(collection.metadata or {}), META_FORMAT: FORMAT_2})

        store._call("making the collection format 2", as_format_2)
        assert EXPIRES_AT_KEY not in _entries(store)[entry_id(records[1])]
        assert store.count(OWNER) == 1, "without the key the live condition hides a record"
    with open_store() as reopened:
        clock = ManualClock()
        reopened.clock = clock
        assert reopened._fresh_meta()[META_FORMAT] == FORMAT
        assert all(meta[EXPIRES_AT_KEY] == NEVER_EXPIRES_MICROS for meta in _entries(reopened).values())
        assert reopened.list(OWNER) == records
        assert reopened.get(OWNER, [r.id for r in records]) == records
        assert reopened.count(OWNER, filter={"expires_at": {"$gt": clock.now + timedelta(days=10**4)}}) == 5
        assert reopened.search(OWNER, vector=vectors[3], limit=1)[0].record == records[3]
        assert [(e.scope, e.count) for e in reopened.scopes(OWNER)] == [(OWNER.exact(), 5)]
        short = make_record(OWNER, "short", minute=9)
        reopened.add([short], ttl=5)
        clock.advance(10**6)
        assert reopened.list(OWNER) == records
        assert reopened.update(OWNER, records[0].id, content="still here").expires_at is None
        assert reopened._call("backfilling again", backfill_expiry) == 0
