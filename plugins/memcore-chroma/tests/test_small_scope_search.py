"""A vector search in a small scope ranks the scope's vectors exactly instead of asking HNSW."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chromadb.errors import InternalError
from memcore_chroma import store as chroma_store
from memcore_chroma.store import ChromaStore, RecentKeys

from memcore.errors import StoreError
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope

DIM, SMALL = 16, 40


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ChromaStore]:
    monkeypatch.setattr(chroma_store, "EXACT_SCOPE", SMALL)  # a small threshold keeps the test quick
    opened = ChromaStore(tmp_path / "chroma")
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def actions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    call = ChromaStore._call

    def recorded(self: ChromaStore, action: str, operation: Any) -> Any:
        seen.append(action)
        return call(self, action, operation)

    monkeypatch.setattr(ChromaStore, "_call", recorded)
    return seen


def _fill(store: ChromaStore, scope: Scope, count: int, seed: int) -> tuple[list[MemoryRecord], np.ndarray]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    records = [
        MemoryRecord(
            scope=scope, message=Message(role="user", content=f"note {i} {'even' if i % 2 == 0 else ''}")
        )
        for i in range(count)
    ]
    store.add(records, vectors)
    return records, vectors


def _exact(records: list[MemoryRecord], vectors: np.ndarray, query: np.ndarray, k: int) -> list[Any]:
    order = np.argsort(-(vectors @ query), kind="stable")[:k]
    return [records[i].id for i in order]


def test_small_scopes_are_ranked_exactly(store: ChromaStore, actions: list[str]) -> None:
    scopes = [Scope(tenant="t", user_id=f"u{i}") for i in range(12)]
    filled = [_fill(store, scope, 30, seed) for seed, scope in enumerate(scopes)]
    query = np.random.default_rng(99).standard_normal(DIM).astype(np.float32)
    query /= np.linalg.norm(query)
    for scope, (records, vectors) in zip(scopes, filled, strict=True):
        hits = store.search(scope, vector=query, limit=10)
        assert [h.record.id for h in hits] == _exact(records, vectors, query, 10)
        assert all(h.record.scope == scope for h in hits)
        assert [h.score for h in hits] == pytest.approx(sorted((vectors @ query).tolist(), reverse=True)[:10])
    assert "searching" not in actions and actions.count("reading a small scope") == len(scopes)
    evens = store.search(scopes[0], vector=query, text="even", limit=5)
    records, vectors = filled[0]
    by_id = {r.id: r for r in records}
    ranked = _exact(records, vectors, query, len(records))
    assert [h.record.id for h in evens] == [i for i in ranked if "even" in by_id[i].message.content][:5]


def test_a_filter_chroma_cannot_apply_exactly_is_checked_on_the_small_scope(store: ChromaStore) -> None:
    scope = Scope(tenant="t", user_id="big-numbers")
    records, vectors = _fill(store, scope, 30, seed=3)
    big = 2**60  # beyond 2**53: Chroma compares floats, the store checks the exact value in Python
    numbered = [r.model_copy(update={"metadata": {"n": big + i}}) for i, r in enumerate(records)]
    store.add(numbered, vectors)
    query = vectors[0]
    hits = store.search(scope, vector=query, filter={"metadata.n": {"$gte": big + 15}}, limit=5)
    ranked = _exact(numbered, vectors, query, len(numbered))
    number = {r.id: r.metadata["n"] for r in numbered}
    assert [h.record.id for h in hits] == [i for i in ranked if number[i] >= big + 15][:5]


def test_a_large_scope_goes_to_hnsw_and_is_remembered(store: ChromaStore, actions: list[str]) -> None:
    large = Scope(tenant="t", user_id="large")
    _fill(store, large, SMALL + 20, seed=1)
    query = np.ones(DIM, dtype=np.float32) / np.sqrt(DIM)
    assert len(store.search(large, vector=query, limit=10)) == 10
    assert actions.count("reading a small scope") == 1 and actions.count("searching") == 1
    assert len(store.search(large, vector=query, limit=10)) == 10
    assert actions.count("reading a small scope") == 1 and actions.count("searching") == 2


def test_a_server_read_racing_a_delete_falls_back_to_hnsw(
    store: ChromaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = Scope(tenant="t", user_id="raced")
    records, vectors = _fill(store, scope, 10, seed=5)
    call = ChromaStore._call

    def failing(self: ChromaStore, action: str, operation: Any) -> Any:
        if action == "reading a small scope":
            try:
                raise InternalError("Error executing plan: Internal error: Error finding id")
            except InternalError as exc:
                raise StoreError("Chroma failed while reading a small scope") from exc
        return call(self, action, operation)

    monkeypatch.setattr(ChromaStore, "_call", failing)
    hits = store.search(scope, vector=vectors[3], limit=3)
    assert hits[0].record.id == records[3].id


def test_recent_keys_forget_the_least_recently_seen() -> None:
    keys = RecentKeys(2)
    keys.add(b"a")
    keys.add(b"b")
    assert b"a" in keys  # seen: now the most recent
    keys.add(b"c")
    assert b"a" in keys and b"c" in keys and b"b" not in keys
