"""The shortcuts of :mod:`memcore_chroma.shortcuts`: a window read from its last bound or from the
collection's tail, a search without a ``where``, a selective filter read across scopes. Each must
answer exactly what the sure way answers, never another scope's record, and fall back when it
cannot: checked against a model through interleaved writers, imports of old records, deletes and
expiry, on the embedded client and on a server."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from memcore_chroma import reads
from memcore_chroma.calls import CollectionCall
from memcore_chroma.deployments import ChromaMemoryStore, ChromaStore
from memcore_chroma.encoding import flat_metadata
from memcore_chroma.reads import MIN_HIT_PAGE, MIN_OVERFETCH, SHORTCUT_WINDOW, hit_pages
from memcore_chroma.shortcuts import SKIPS_AFTER_A_MISS, Misses
from memcore_chroma.store import ChromaStoreBase

from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.testing.helpers import make_record, random_vectors

AGENT = Scope(tenant="t", user_id="me", agent_id="a", session_id="s")
SCOPES = [
    AGENT,
    Scope(tenant="t", user_id="me", agent_id="a", session_id="other-session"),
    Scope(tenant="t", user_id="me", agent_id="b", session_id="s"),
    Scope(tenant="elsewhere", user_id="me", agent_id="a", session_id="s"),  # same fields, other tenant
]
OWNER = Scope(tenant="t", user_id="me", agent_id="a")


def _newest(model: dict[Any, MemoryRecord], scope: Scope, limit: int) -> list[MemoryRecord]:
    now = datetime.now(UTC)
    kept = [r for r in model.values() if scope.matches(r.scope) and r.is_live(now)]
    return sorted(kept, key=lambda r: (r.created_at, r.id), reverse=True)[:limit]


def test_windows_read_by_shortcut_match_a_model_through_interleaved_writes_imports_and_deletes(
    open_store: Callable[[], ChromaStoreBase], calls: list[CollectionCall]
) -> None:
    rng = random.Random(11)
    model: dict[Any, MemoryRecord] = {}
    minute = 0
    with open_store() as store:
        for step in range(120):
            action = rng.random()
            if action < 0.6:  # each scope writes in turn, the agent's scope most
                minute += 1
                scope = AGENT if rng.random() < 0.4 else rng.choice(SCOPES)
                batch = [
                    make_record(scope, f"turn {minute}.{i}", minute=minute) for i in range(rng.randint(1, 3))
                ]
            elif action < 0.7:  # an import of old records, inserted last
                batch = [
                    make_record(rng.choice(SCOPES), "old", minute=rng.randint(-50, minute)) for _ in range(3)
                ]
            elif action < 0.78:  # a record of the agent that has already expired
                batch = [
                    make_record(AGENT, "expired", minute=minute).model_copy(
                        update={"expires_at": datetime.now(UTC) - timedelta(seconds=1)}
                    )
                ]
            else:
                batch = []
            if batch:
                store.add(batch)
                model.update({r.key: r for r in batch})
            if action >= 0.9 and model:  # delete some of the agent's newest (inside its last window)
                victims = _newest(model, AGENT, 4)[: rng.randint(1, 4)]
                store.delete(AGENT, [r.id for r in victims])
                for r in victims:
                    del model[r.key]
            for scope in (AGENT, OWNER, SCOPES[3]):
                limit = rng.choice([1, 3, 8])
                assert store.list(scope, order="desc", limit=limit) == _newest(model, scope, limit), step
        actions = {c.action for c in calls}
        assert {"bounding times", "sampling the newest entries"} <= actions, "a shortcut was never taken"


def test_a_window_falls_back_when_its_scope_is_not_in_the_tail(
    open_store: Callable[[], ChromaStoreBase], calls: list[CollectionCall]
) -> None:
    mine = [make_record(AGENT, f"mine {m}", minute=m) for m in range(10)]
    others = [make_record(SCOPES[2], f"other {m}", minute=100 + m) for m in range(200)]
    with open_store() as store:
        store.add(mine)
        store.add(others)  # inserted after and newer: the tail and the time bound are all theirs
        for _ in range(SKIPS_AFTER_A_MISS + 2):
            calls.clear()
            assert store.list(AGENT, order="desc", limit=4) == mine[::-1][:4]
        tail_reads = [c for c in calls if c.action == "sampling the newest entries"]
        assert tail_reads, "the shortcut is tried again after its skips"


def test_a_large_scope_is_searched_without_a_where_and_a_small_one_with_it(
    open_store: Callable[[], ChromaStoreBase], calls: list[CollectionCall], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "SMALL_SELECTION", 10)
    big = [make_record(OWNER.model_copy(update={"session_id": f"s{i % 3}"}), f"b{i}") for i in range(300)]
    small = [make_record(SCOPES[3], f"x{i}") for i in range(12)]  # same user and agent, another tenant
    vectors = random_vectors(len(big) + len(small), seed=3)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    with open_store() as store:
        store.add(big, vectors[: len(big)])
        store.add(small, vectors[len(big) :])
        for scope, records, rows in (
            (OWNER, big, range(len(big))),
            (SCOPES[3], small, range(len(big), len(unit))),
        ):
            for query_row in (rows[0], rows[5], rows[-1]):
                for _ in range(2):
                    calls.clear()
                    hits = store.search(scope, vector=vectors[query_row], limit=5)
                    scores = unit[list(rows)] @ unit[query_row]
                    expected = [records[i] for i in np.argsort(-scores)[:5]]
                    assert [h.record for h in hits] == expected
        calls.clear()
        store.search(OWNER, vector=vectors[7], limit=5)
        assert [c.method for c in calls] == ["query", "get"] and "where" not in calls[0].kwargs
        assert calls[0].kwargs["include"] == ["distances"] and "ids" in calls[1].kwargs
        calls.clear()
        store.search(SCOPES[3], vector=vectors[len(big)], limit=5)
        assert all("where" in c.kwargs or "ids" in c.kwargs for c in calls), (
            "a small scope's miss is remembered"
        )
        store.delete(OWNER, [big[7].id])
        assert big[7] not in [h.record for h in store.search(OWNER, vector=vectors[7], limit=5)]


def test_a_selective_filter_is_read_across_scopes_and_a_broad_one_with_the_scope(
    open_store: Callable[[], ChromaStoreBase], calls: list[CollectionCall], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "SMALL_SELECTION", 6)
    pinned = {scope: make_record(scope, f"system of {scope}", role="system", minute=0) for scope in SCOPES}
    turns = [make_record(scope, f"turn {i}", minute=i + 1) for i in range(20) for scope in SCOPES]
    with open_store() as store:
        store.add([*pinned.values(), *turns])
        for scope in SCOPES:
            calls.clear()
            assert store.list(scope, filter={"role": "system"}, limit=1) == [pinned[scope]]
            assert calls[0].action == "listing selected entries" and "scope.key" not in str(calls[0].kwargs)
        user_turns = sorted((t for t in turns if t.scope == AGENT), key=lambda r: (r.created_at, r.id))
        for _ in range(SKIPS_AFTER_A_MISS + 2):  # 80 user turns: more than SMALL_SELECTION
            assert store.list(AGENT, filter={"role": "user"}) == user_turns
        store.delete(AGENT, [pinned[AGENT].id])
        assert store.list(AGENT, filter={"role": "system"}, limit=1) == []


def test_a_missed_shortcut_is_skipped_for_a_while_then_tried_again() -> None:
    misses = Misses()
    assert misses.worth_trying("w")
    misses.missed("w")
    assert [misses.worth_trying("w") for _ in range(SKIPS_AFTER_A_MISS)] == [False] * SKIPS_AFTER_A_MISS
    assert misses.worth_trying("w") and misses.worth_trying("other")


def test_an_unfiltered_search_never_decodes_another_tenants_entry(
    open_store: Callable[[], ChromaStoreBase], calls: list[CollectionCall]
) -> None:
    mine, theirs = Scope(tenant="ta", user_id="u"), Scope(tenant="tb", user_id="u")
    vectors = random_vectors(600, seed=1, dim=8)
    with open_store() as store:
        own = [make_record(mine, f"a{i}") for i in range(300)]
        store.add(own, vectors[:300])
        store.add([make_record(theirs, f"b{i}") for i in range(300)], vectors[300:])
        # the other tenant's entry that memcore cannot decode (another tool's), nearest the query
        store._collection.add(
            ids=["not-a-memcore-entry"],
            embeddings=[vectors[0].tolist()],
            documents=["{broken"],
            metadatas=[flat_metadata(make_record(theirs, "x"), True)],
        )
        for _ in range(2):
            hits = store.search(mine, vector=vectors[0], limit=5)
            assert hits[0].record == own[0] and all(h.record.scope == mine for h in hits)
        assert "reading the nearest entries" in {c.action for c in calls}, "the shortcut was not taken"


def test_hits_are_read_a_quarter_past_the_limit_first_then_twice_the_limit_a_page() -> None:
    assert [len(page) for page in hit_pages(list(range(100)), 25)] == [31, 50, 19]
    assert [len(page) for page in hit_pages(list(range(40)), 5)] == [MIN_HIT_PAGE, MIN_HIT_PAGE, 8]
    assert list(hit_pages([], 25)) == []  # Chroma refuses a get of no ids


def test_a_first_page_reads_as_deep_as_the_last_search_of_the_selection_had_to() -> None:
    assert [len(page) for page in hit_pages(list(range(100)), 25, depth=50)] == [62, 38]
    assert [len(page) for page in hit_pages(list(range(100)), 25, depth=20)] == [31, 50, 19]
    assert [len(page) for page in hit_pages(list(range(400)), 100, depth=400)] == [
        300,
        100,
    ]  # at most 3 x limit


def test_a_scope_holding_half_the_collection_reads_its_hits_in_one_page_once_it_knows_how_deep(
    open_store: Callable[[], ChromaStoreBase], calls: list[CollectionCall]
) -> None:
    """The first search of an agent holding every other entry needs a second page (31 entries hold
    ~15 of its 25 hits); the next reads as deep as that one needed, and a quarter more, at once."""
    other = Scope(tenant="t", user_id="me", agent_id="b", session_id="s")
    vectors = random_vectors(800, seed=4, dim=8)  # 400 an agent: more than a small selection
    records = [make_record(AGENT if i % 2 == 0 else other, f"turn {i}") for i in range(800)]
    with open_store() as store:
        store.add(records, vectors)
        pages = []
        for _ in range(2):
            calls.clear()
            hits = store.search(AGENT, vector=vectors[7], limit=25)
            pages.append([len(c.kwargs["ids"]) for c in calls if c.action == "reading the nearest entries"])
            units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
            ranked = [i for i in np.argsort(-(units @ units[7]), kind="stable") if i % 2 == 0]
            assert [h.record.id for h in hits] == [records[i].id for i in ranked[:25]]
        everyone = list(np.argsort(-(units @ units[7]), kind="stable"))
        depth = everyone.index(ranked[24]) + 1  # where the 25th hit lies among the collection's nearest
        assert pages == [[31, 50], [depth + depth // 4]]


def test_a_search_of_the_whole_collection_reads_few_more_entries_than_it_keeps(
    open_store: Callable[[], ChromaStoreBase], calls: list[CollectionCall]
) -> None:
    """An agent's recall over its own scope (all of the collection): the best 25 are read with
    six more, not 25 more, and are still the exact 25 nearest in order."""
    vectors = random_vectors(400, seed=3, dim=8)
    records = [make_record(AGENT, f"turn {i}") for i in range(400)]
    with open_store() as store:
        store.add(records, vectors)
        calls.clear()
        hits = store.search(AGENT, vector=vectors[7], limit=25)
        reads_by_id = [c for c in calls if c.action == "reading the nearest entries"]
        assert [len(c.kwargs["ids"]) for c in reads_by_id] == [31]
        units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        exact = np.argsort(-(units @ units[7]), kind="stable")[:25]
        assert [h.record.id for h in hits] == [records[i].id for i in exact]


def test_a_window_larger_than_the_shortcuts_read_is_read_the_sure_way(
    open_store: Callable[[], ChromaStoreBase], calls: list[CollectionCall]
) -> None:
    records = [make_record(AGENT, f"turn {m}", minute=m) for m in range(SHORTCUT_WINDOW + 20)]
    with open_store() as store:
        store.add(records)
        calls.clear()
        assert (
            store.list(AGENT, order="desc", limit=SHORTCUT_WINDOW + 1) == records[::-1][: SHORTCUT_WINDOW + 1]
        )
        assert not {"bounding times", "listing the newest entries"} & {c.action for c in calls}


def test_a_large_scope_searched_without_a_where_finds_its_true_nearest(calls: list[CollectionCall]) -> None:
    """At half the collection, the scope's nearest among the collection's nearest are as good as a
    filtered search's: the unfiltered search asks twice ``ef_search`` nearest (200 by default).
    Asking only its over-fetch (64) missed 10-18 of these 600 true hits; this misses 0-2."""
    rng = np.random.default_rng(5)
    vectors = random_vectors(4_000, seed=5, dim=48)
    mine = rng.random(len(vectors)) < 0.5
    scope, other = Scope(tenant="a", user_id="u"), Scope(tenant="b", user_id="u")
    records = [make_record(scope if own else other, f"r{i}") for i, own in enumerate(mine)]
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    rows = np.flatnonzero(mine)
    missed = 0
    with ChromaMemoryStore() as store:
        store.add(records, vectors)
        for query in rng.standard_normal((60, 48)).astype(np.float32):
            calls.clear()
            found = {h.record.id for h in store.search(scope, vector=query, limit=10)}
            truth = {
                records[i].id for i in rows[np.argsort(-(unit[rows] @ (query / np.linalg.norm(query))))[:10]]
            }
            missed += len(truth - found)
            asked = [c for c in calls if c.method == "query"]
            assert len(asked) == 1 and "where" not in asked[0].kwargs and asked[0].kwargs["n_results"] == 200
    assert missed <= 5


def test_the_unfiltered_search_asks_twice_the_collections_ef_search(
    tmp_path: Path, calls: list[CollectionCall], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "SMALL_SELECTION", 10)
    vectors = random_vectors(400, seed=8)
    records = [make_record(Scope(tenant="a" if i % 2 else "b", user_id="u"), f"r{i}") for i in range(400)]
    for ef_search, asked in ((300, 600), (10, MIN_OVERFETCH)):  # a narrow setting still narrows
        with ChromaStore(tmp_path / f"ef{ef_search}", ef_search=ef_search) as store:
            store.add(records, vectors)
            calls.clear()
            store.search(Scope(tenant="a"), vector=vectors[0], limit=5)
            assert [c.kwargs["n_results"] for c in calls if c.method == "query"] == [asked]
