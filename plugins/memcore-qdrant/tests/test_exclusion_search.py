"""Searches with a filter that only excludes: the best hits checked here, Qdrant's filter only when needed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from memcore_qdrant import QdrantStore
from memcore_qdrant.filters import excludes_only

from memcore.filters import FilterSpec, evaluate, parse_filter
from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.testing.helpers import make_record, random_vectors

MINE = Scope(tenant="t", user_id="alice")
THEIRS = Scope(tenant="t", user_id="bob")
QUERIES = random_vectors(12, seed=7)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[QdrantStore]:
    """80 of alice's records (one in ten a system or developer message), 40 of bob's, all system messages."""
    with QdrantStore.from_url(f"qdrant://{tmp_path}/store") as opened:
        roles: list[Any] = [
            "system" if i % 20 == 0 else "developer" if i % 20 == 10 else "user" for i in range(80)
        ]
        mine = [make_record(MINE, f"mine {i}", role=role, metadata={"n": i}) for i, role in enumerate(roles)]
        theirs = [make_record(THEIRS, f"theirs {i}", role="system") for i in range(40)]
        opened.add(mine, random_vectors(80, seed=1))
        opened.add(theirs, random_vectors(40, seed=2))
        yield opened


def _queries_made(store: QdrantStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gains the limit of every vector query the store sends to its engine."""
    engine = store._engine
    limits: list[int] = []
    real_query = engine.query

    def counted(vector: Any, where: Any, limit: int) -> Any:
        limits.append(limit)
        return real_query(vector, where, limit)

    monkeypatch.setattr(engine, "query", counted)
    return limits


def _exact(store: QdrantStore, spec: FilterSpec, query: np.ndarray, limit: int) -> list[str]:
    """The reference: every record of the scope, filtered and ranked by cosine similarity here."""
    records: list[MemoryRecord] = store.list(MINE)
    vectors = store.vectors(MINE, [r.id for r in records])
    node = parse_filter(spec)
    unit = query / np.linalg.norm(query)
    scored = [
        (float(vectors[r.id] @ unit / np.linalg.norm(vectors[r.id])), r.message.content)
        for r in records
        if evaluate(node, r)
    ]
    return [content for _, content in sorted(scored, reverse=True)[:limit]]


def _found(store: QdrantStore, spec: FilterSpec, query: np.ndarray, limit: int) -> list[str]:
    return [hit.record.message.content for hit in store.search(MINE, vector=query, filter=spec, limit=limit)]


@pytest.mark.parametrize(
    "spec",
    [
        {"role": {"$nin": ["system", "developer"]}},
        {"role": {"$ne": "developer"}},
        {"$not": {"metadata.n": {"$lt": 3}}},
        {"$and": [{"role": {"$ne": "system"}}, {"metadata.n": {"$nin": [1, 2, 3]}}]},
    ],
)
def test_an_excluding_filter_is_checked_on_the_best_hits_in_one_query(
    store: QdrantStore, spec: FilterSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits = _queries_made(store, monkeypatch)
    for query in QUERIES:
        assert _found(store, spec, query, 10) == _exact(store, spec, query, 10)
    assert limits == [20] * len(QUERIES)


def test_when_too_few_of_the_best_hits_pass_qdrant_filters(
    store: QdrantStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec: FilterSpec = {"role": {"$ne": "user"}}  # 8 of alice's 80 records pass
    limits = _queries_made(store, monkeypatch)
    for query in QUERIES:
        found = _found(store, spec, query, 5)
        assert found == _exact(store, spec, query, 5)
        assert len(found) == 5
    assert limits == [10, 5] * len(QUERIES)


def test_a_scope_smaller_than_the_headroom_is_answered_by_the_first_query(
    store: QdrantStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec: FilterSpec = {"role": {"$ne": "user"}}
    limits = _queries_made(store, monkeypatch)
    for query in QUERIES:
        assert _found(store, spec, query, 50) == _exact(store, spec, query, 50)  # all 8 that pass
    assert limits == [100] * len(QUERIES)


def test_the_first_query_never_reaches_another_scope(store: QdrantStore) -> None:
    # bob's records are all system messages: an unscoped first query would fill the hits with them
    for query in QUERIES:
        hits = store.search(MINE, vector=query, filter={"role": {"$ne": "user"}}, limit=50)
        assert {hit.record.scope for hit in hits} == {MINE}


@pytest.mark.parametrize(
    ("spec", "excluding"),
    [
        ({"role": {"$nin": ["system"]}}, True),
        ({"role": {"$ne": "system"}}, True),
        ({"$not": {"role": "user"}}, True),
        ({"$and": [{"role": {"$ne": "system"}}, {"$not": {"kind": "fact"}}]}, True),
        ({"role": "user"}, False),
        ({"role": {"$in": ["user"]}}, False),
        ({"$or": [{"role": {"$ne": "system"}}, {"kind": {"$ne": "fact"}}]}, False),
        ({"$and": [{"role": {"$ne": "system"}}, {"kind": "fact"}]}, False),
        ({"metadata.n": {"$exists": False}}, False),
    ],
)
def test_which_filters_only_exclude(spec: FilterSpec, excluding: bool) -> None:
    node = parse_filter(spec)
    assert node is not None
    assert excludes_only(node) is excluding
