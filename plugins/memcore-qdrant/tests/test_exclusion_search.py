"""Searches with a filter that only excludes: the best hits checked here, Qdrant's filter only when needed."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from memcore_qdrant import QdrantStore
from memcore_qdrant.filters import Clause, Condition, excludes_only, flattened, scoped, text_contains
from memcore_qdrant.store import EXCLUSION_MAX_LIMIT

from memcore.filters import FilterSpec, evaluate, parse_filter
from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.testing.helpers import make_record, random_vectors
from memcore.testing.lifecycle_tests import ManualClock

MINE = Scope(tenant="t", user_id="alice")
THEIRS = Scope(tenant="t", user_id="bob")
QUERIES = random_vectors(12, seed=7)


@pytest.fixture(params=["edge", "local client"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[QdrantStore]:
    """80 of alice's records (one in ten a system or developer message), 40 of bob's, all system
    messages; on Qdrant Edge and on qdrant-client's local mode (the server's code path)."""
    path = tmp_path / "store"
    opened = (
        QdrantStore.from_url(f"qdrant://{path}")
        if request.param == "edge"
        else QdrantStore.open_local_client(path)
    )
    with opened:
        opened.clock = ManualClock()  # one "now" for every query: the live condition stays the same
        roles: list[Any] = [
            "system" if i % 20 == 0 else "developer" if i % 20 == 10 else "user" for i in range(80)
        ]
        mine = [make_record(MINE, f"mine {i}", role=role, metadata={"n": i}) for i, role in enumerate(roles)]
        theirs = [make_record(THEIRS, f"theirs {i}", role="system") for i in range(40)]
        opened.add(mine, random_vectors(80, seed=1))
        opened.add(theirs, random_vectors(40, seed=2))
        yield opened


def _queries_made(store: QdrantStore, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, Clause]]:
    """A list that gains the limit and the filter of every vector query the store sends to its engine."""
    engine = store._engine
    sent: list[tuple[int, Clause]] = []
    real_query = engine.query

    @functools.wraps(real_query)  # the store calls its engine's methods by name
    def recorded(vector: Any, where: Clause, limit: int) -> Any:
        sent.append((limit, where))
        return real_query(vector, where, limit)

    monkeypatch.setattr(engine, "query", recorded)
    return sent


def _alive(store: QdrantStore) -> tuple[Condition, ...]:
    """The live condition the scope's queries carry: none on Qdrant Edge, which leaves it out of a
    scope without expired points (:attr:`~memcore_qdrant.engine.Engine.prunes_live_condition`)."""
    return () if store._engine.prunes_live_condition else (store._alive(),)


def _limits(sent: list[tuple[int, Clause]]) -> list[int]:
    return [limit for limit, _ in sent]


def _exact(
    store: QdrantStore, spec: FilterSpec, query: np.ndarray, limit: int, text: str | None = None
) -> list[str]:
    """The reference: every record of the scope, filtered and ranked by cosine similarity here."""
    records: list[MemoryRecord] = store.list(MINE)
    vectors = store.vectors(MINE, [r.id for r in records])
    node = parse_filter(spec)
    unit = query / np.linalg.norm(query)
    scored = [
        (float(vectors[r.id] @ unit / np.linalg.norm(vectors[r.id])), r.message.content)
        for r in records
        if evaluate(node, r) and (text is None or text.casefold() in r.message.content.casefold())
    ]
    return [content for _, content in sorted(scored, reverse=True)[:limit]]


def _found(
    store: QdrantStore, spec: FilterSpec, query: np.ndarray, limit: int, text: str | None = None
) -> list[str]:
    hits = store.search(MINE, vector=query, text=text, filter=spec, limit=limit)
    return [hit.record.message.content for hit in hits]


@pytest.mark.parametrize(
    "spec",
    [
        {"role": {"$nin": ["system", "developer"]}},
        {"role": {"$ne": "developer"}},
        {"metadata.n": {"$nin": [0, 1, 2]}},
        {"$and": [{"role": {"$ne": "system"}}, {"metadata.n": {"$nin": [1, 2, 3]}}]},
    ],
)
def test_an_excluding_filter_is_checked_on_the_best_hits_of_the_scope(
    store: QdrantStore, spec: FilterSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = _queries_made(store, monkeypatch)
    for query in QUERIES:
        assert _found(store, spec, query, 10) == _exact(store, spec, query, 10)
    # The scope (and the live condition) alone: no must_not of the filter reached Qdrant.
    assert sent == [(20, scoped(MINE, *_alive(store)))] * len(QUERIES)


def test_a_text_condition_stays_in_the_first_query(
    store: QdrantStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec: FilterSpec = {"role": {"$ne": "developer"}}  # "mine 1", "mine 10".."mine 19": one developer
    sent = _queries_made(store, monkeypatch)
    for query in QUERIES:
        found = _found(store, spec, query, 5, text="MINE 1")
        assert found == _exact(store, spec, query, 5, text="MINE 1")
        assert len(found) == 5
    assert sent == [(10, scoped(MINE, text_contains("MINE 1"), *_alive(store)))] * len(QUERIES)


def test_when_too_few_of_the_best_hits_pass_qdrant_filters(
    store: QdrantStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec: FilterSpec = {"role": {"$ne": "user"}}  # 8 of alice's 80 records pass
    sent = _queries_made(store, monkeypatch)
    for query in QUERIES:
        found = _found(store, spec, query, 5)
        assert found == _exact(store, spec, query, 5)
        assert len(found) == 5
    assert _limits(sent) == [10, 5] * len(QUERIES)
    assert all(flattened(where).must_not for _, where in sent[1::2])  # the second: Qdrant filters


def test_a_scope_smaller_than_the_headroom_is_answered_by_the_first_query(
    store: QdrantStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec: FilterSpec = {"role": {"$ne": "user"}}
    sent = _queries_made(store, monkeypatch)
    for query in QUERIES:
        assert _found(store, spec, query, 50) == _exact(store, spec, query, 50)  # all 8 that pass
    assert _limits(sent) == [100] * len(QUERIES)


@pytest.mark.parametrize(
    "spec", [{"$not": {"role": {"$in": ["system", "developer"]}}}, {"metadata.n": {"$ne": 3}}]
)
def test_a_not_or_a_large_limit_goes_to_qdrant_directly(
    store: QdrantStore, spec: FilterSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 10 if "$not" in spec else EXCLUSION_MAX_LIMIT + 1
    sent = _queries_made(store, monkeypatch)
    for query in QUERIES[:3]:
        assert _found(store, spec, query, limit) == _exact(store, spec, query, limit)
    assert _limits(sent) == [limit] * 3


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
        ({"$and": [{"role": {"$ne": "system"}}, {"kind": {"$nin": ["fact"]}}]}, True),
        ({"$not": {"role": "user"}}, False),
        ({"$not": {"$not": {"role": {"$ne": "user"}}}}, False),
        ({"$and": [{"role": {"$ne": "system"}}, {"$not": {"kind": "fact"}}]}, False),
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
