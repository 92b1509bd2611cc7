"""The built-in stores' keyword index gives the exact scan's BM25 scores and order, through every change."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from memcore.filters import parse_filter
from memcore.queries import KeywordQuery
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import BaseStore
from memcore.stores.in_memory import InMemoryStore
from memcore.stores.jsonl import JsonlStore

WORDS = ["oslo", "trip", "painting", "pottery", "bowls", "norway", "summer", "june", "flights", "monday"]
QUERIES = ["oslo trip", "painting pictures in june", "pottery", "summer flights to norway", "the and of"]
SCOPES = [
    Scope(tenant="t"),
    Scope(tenant="t", user_id="u1"),
    Scope(tenant="t", user_id="u1", agent_id="a1"),
    Scope(tenant="t", user_id="u1", agent_id="a1", session_id="s1"),
    Scope(tenant="t", session_id="s2"),
    Scope(tenant="other"),
]
FILTERS = [None, {"role": "assistant"}, {"$not": {"kind": "fact"}}, {"metadata.n": {"$lt": 20}}]


def _records(rng: random.Random, count: int) -> list[MemoryRecord]:
    return [
        MemoryRecord(
            scope=Scope(
                tenant=rng.choice(["t", "t", "other"]),
                user_id=rng.choice(["u1", "u2", None]),
                agent_id=rng.choice(["a1", None]),
                session_id=rng.choice(["s1", "s2", None]),
            ),
            message=Message(
                role=rng.choice(["user", "assistant"]),
                content=" ".join(rng.choices(WORDS, k=rng.randint(0, 8))) or "ok",
            ),
            kind=rng.choice(["turn", "fact"]),
            metadata={"n": rng.randint(0, 40)},
        )
        for _ in range(count)
    ]


def _assert_same_as_the_scan(store: BaseStore) -> None:
    for scope in SCOPES:
        for raw in FILTERS:
            node = parse_filter(raw)
            for query in QUERIES:
                indexed = store.search(scope, keywords=query, filter=raw, limit=15)
                scanned = BaseStore._keyword_search(store, scope, KeywordQuery(query, node, 15))
                assert [h.record.id for h in indexed] == [h.record.id for h in scanned], (scope, raw, query)
                assert [h.score for h in indexed] == pytest.approx([h.score for h in scanned])


def _churn(store: BaseStore, rng: random.Random) -> None:
    """Writes, replacements of content in place (same id), and deletions, once the index exists."""
    written = _records(rng, 120)
    store.add(written)
    _assert_same_as_the_scan(store)  # builds the postings of every partition
    for record in rng.sample(written, 30):
        words = " ".join(rng.choices(WORDS, k=5))
        store.add([record.model_copy(update={"message": Message(role="user", content=words)})])
    for record in rng.sample(written, 40):
        store.delete(record.scope, [record.id])
    store.add(_records(rng, 30))


def test_memory_store_keyword_index_follows_writes_replacements_and_deletes() -> None:
    rng = random.Random(7)
    store = InMemoryStore()
    _churn(store, rng)
    _assert_same_as_the_scan(store)


def test_jsonl_keyword_index_is_rebuilt_after_reopening(tmp_path: Path) -> None:
    rng = random.Random(11)
    store = JsonlStore(tmp_path / "store")
    _churn(store, rng)
    _assert_same_as_the_scan(store)
    store.close()
    reopened = JsonlStore(tmp_path / "store")
    _assert_same_as_the_scan(reopened)
    reopened.close()


def test_builtin_stores_declare_their_keyword_index_and_hybrid_recall() -> None:
    for store in (InMemoryStore, JsonlStore):
        assert store.capabilities.keyword_index
        assert store.capabilities.default_recall == "hybrid"
