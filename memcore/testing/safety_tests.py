"""Conformance mixins for what must never happen: leaks across scopes, and bad input that slips in.

Every read and delete path is checked against a neighbouring scope; every kind
of bad input must raise a :mod:`memcore.errors` type and leave the store as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from memcore.errors import (
    DimensionMismatchError,
    FilterError,
    InvalidIdError,
    InvalidInputError,
    InvalidLimitError,
    InvalidVectorError,
    MemcoreError,
    RecordTooLargeError,
    ScopeError,
    StoreClosedError,
)
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing.helpers import DIM, StoreFixtures, ids, make_record, new_scope, random_vectors, snapshot
from memcore.validation import MAX_LIMIT, MAX_RECORD_BYTES


class ScopeIsolationTests(StoreFixtures):
    """No read or delete path ever returns, counts or deletes a record of another scope."""

    @pytest.fixture
    def two_tenants(self, store: Store) -> tuple[Store, Scope, Scope, list[MemoryRecord], list[MemoryRecord]]:
        mine, theirs = new_scope(user_id="same-user"), new_scope(user_id="same-user")
        my_records = [make_record(mine, f"shared words {i}", metadata={"k": i}) for i in range(5)]
        their_records = [make_record(theirs, f"shared words {i}", metadata={"k": i}) for i in range(5)]
        vectors = random_vectors(5, seed=1)
        store.add(my_records, vectors)
        store.add(their_records, vectors)
        return store, mine, theirs, my_records, their_records

    def test_every_read_path_is_scoped(self, two_tenants: Any) -> None:
        store, mine, _, my_records, their_records = two_tenants
        mine_ids = set(ids(my_records))
        assert set(ids(store.list(mine))) == mine_ids
        assert store.get(mine, ids(their_records)) == []
        assert store.vectors(mine, ids(their_records)) == {}
        assert store.count(mine) == 5
        assert store.count(mine, filter={"metadata.k": {"$gte": 0}}) == 5
        hits = store.search(mine, vector=random_vectors(1, seed=1)[0], limit=10)
        assert {h.record.id for h in hits} == mine_ids
        if store.capabilities.text_search:
            assert {h.record.id for h in store.search(mine, text="shared", limit=10)} == mine_ids

    def test_filters_cannot_widen_the_scope(self, two_tenants: Any) -> None:
        store, mine, _, my_records, _ = two_tenants
        wide = {"$or": [{"metadata.k": {"$exists": True}}, {"$not": {"metadata.k": {"$exists": True}}}]}
        assert set(ids(store.list(mine, filter=wide))) == set(ids(my_records))
        assert store.count(mine, filter={"$not": {"role": "system"}}) == 5
        for smuggled in ({"tenant": "x"}, {"scope.user_id": "same-user"}, {"$or": [{"session_id": "s"}]}):
            with pytest.raises(FilterError):
                store.list(mine, filter=smuggled)

    def test_deletes_are_scoped(self, two_tenants: Any) -> None:
        store, mine, theirs, my_records, their_records = two_tenants
        assert store.delete(mine, ids(their_records)) == 0
        assert store.delete_where(mine, {}) == 5
        assert store.count(theirs) == 5
        assert set(ids(store.list(theirs))) == set(ids(their_records))
        assert store.get(theirs, ids(my_records)) == []

    def test_partial_scopes_see_exactly_what_they_name(self, store: Store) -> None:
        tenant = new_scope().tenant
        assert tenant is not None
        cells = {
            (user, session): Scope(tenant=tenant, user_id=user, session_id=session)
            for user in ("u1", "u2")
            for session in ("s1", "s2")
        }
        for scope in cells.values():
            store.add([make_record(scope, str(scope))])
        assert store.count(Scope(tenant=tenant)) == 4
        assert store.count(Scope(tenant=tenant, user_id="u1")) == 2
        assert store.count(Scope(tenant=tenant, session_id="s2")) == 2
        assert store.count(Scope(tenant=tenant, user_id="u2", session_id="s1")) == 1
        assert store.count(Scope(tenant=tenant, agent_id="a")) == 0
        assert store.count(Scope(user_id="u1")) == 0, "a scope without a tenant reads the default tenant"

    def test_an_exact_scope_sees_and_deletes_its_own_level_only(self, store: Store) -> None:
        owner = new_scope(user_id="u")
        levels = [
            owner,
            owner.model_copy(update={"agent_id": "a"}),
            owner.model_copy(update={"session_id": "s"}),
            owner.model_copy(update={"agent_id": "a", "session_id": "s"}),
        ]
        records = [
            make_record(level, f"level words {i}", metadata={"k": i}) for i, level in enumerate(levels)
        ]
        vectors = random_vectors(len(records), seed=4)
        store.add(records, vectors)
        for i, level in enumerate(levels):
            exact, own = level.exact(), [records[i].id]
            assert ids(store.list(exact)) == own
            assert ids(store.list(exact, filter={"metadata.k": {"$gte": 0}}, order="desc", limit=5)) == own
            assert ids(store.get(exact, ids(records))) == own
            assert list(store.vectors(exact, ids(records))) == own
            assert store.count(exact) == 1 and store.count(exact, filter={"role": "user"}) == 1
            assert [h.record.id for h in store.search(exact, vector=vectors[0], limit=10)] == own
            assert [h.record.id for h in store.search(exact, keywords="level words", limit=10)] == own
            if store.capabilities.text_search:
                assert [h.record.id for h in store.search(exact, text="level", limit=10)] == own
        assert store.count(owner) == 4, "the plain scope still reads every level below it"
        assert store.delete(levels[0].exact(), ids(records[1:])) == 0
        assert store.delete_where(levels[1].exact(), {}) == 1
        assert store.delete(levels[2].exact(), ids(records)) == 1
        assert ids(store.list(owner)) == [records[0].id, records[3].id]


def _bad_calls(scope: Scope) -> list[tuple[str, type[MemcoreError], Callable[[Store], object]]]:
    record = make_record(scope, "bad")
    good = random_vectors(1)[0].tolist()
    huge = "x" * (MAX_RECORD_BYTES + 1)
    return [
        ("wrong-dimension", DimensionMismatchError, lambda s: s.add([record], [[*good, 1.0]])),
        ("nan", InvalidVectorError, lambda s: s.add([record], [[float("nan")] * DIM])),
        ("inf", InvalidVectorError, lambda s: s.add([record], [[float("inf"), *good[1:]]])),
        ("minus-inf", InvalidVectorError, lambda s: s.add([record], [[float("-inf"), *good[1:]]])),
        ("beyond-float32", InvalidVectorError, lambda s: s.add([record], [[1e39, *good[1:]]])),
        ("empty-vector", InvalidVectorError, lambda s: s.add([record], [[]])),
        ("zero-vector", InvalidVectorError, lambda s: s.add([record], [[0.0] * DIM])),
        (
            "ragged-vectors",
            InvalidVectorError,
            lambda s: s.add([record, make_record(scope)], [good, good[:2]]),
        ),
        ("vector-count", InvalidVectorError, lambda s: s.add([record], [good, good])),
        ("string-vector", InvalidVectorError, lambda s: s.add([record], [["a"] * DIM])),  # type: ignore[list-item]
        ("oversized", RecordTooLargeError, lambda s: s.add([make_record(scope, huge)])),
        ("not-a-record", InvalidInputError, lambda s: s.add([{"content": "x"}])),  # type: ignore[list-item]
        ("query-nan", InvalidVectorError, lambda s: s.search(scope, vector=[float("nan")] * DIM)),
        ("query-dimension", DimensionMismatchError, lambda s: s.search(scope, vector=good[:3])),
        ("unknown-operator", FilterError, lambda s: s.list(scope, filter={"metadata.a": {"$regex": "x"}})),
        ("unknown-field", FilterError, lambda s: s.count(scope, filter={"content": "x"})),
        ("string-in-range", FilterError, lambda s: s.list(scope, filter={"metadata.a": {"$gt": "5"}})),
        ("list-as-scalar", FilterError, lambda s: s.list(scope, filter={"metadata.a": ["x", "y"]})),
        ("scalar-as-list", FilterError, lambda s: s.list(scope, filter={"metadata.a": {"$in": "x"}})),
        ("empty-or", FilterError, lambda s: s.list(scope, filter={"$or": []})),
        ("unknown-role", FilterError, lambda s: s.list(scope, filter={"role": "robot"})),
        ("filter-not-dict", FilterError, lambda s: s.list(scope, filter="role = user")),  # type: ignore[arg-type]
        ("malformed-uuid", InvalidIdError, lambda s: s.get(scope, ["not-a-uuid"])),
        ("malformed-uuid-delete", InvalidIdError, lambda s: s.delete(scope, ["1234"])),
        ("bare-string-ids", InvalidIdError, lambda s: s.get(scope, str(record.id))),
        ("limit-zero", InvalidLimitError, lambda s: s.search(scope, vector=good, limit=0)),
        ("limit-huge", InvalidLimitError, lambda s: s.list(scope, limit=MAX_LIMIT + 1)),
        ("limit-bool", InvalidLimitError, lambda s: s.search(scope, vector=good, limit=True)),
        ("scope-not-a-scope", ScopeError, lambda s: s.count({"tenant": "x"})),  # type: ignore[arg-type]
        (
            "naive-datetime",
            InvalidInputError,
            lambda s: s.list(scope, before=__import__("datetime").datetime(2026, 1, 1)),
        ),
        ("before-year-1-in-utc", InvalidInputError, lambda s: s.list(scope, before=_YEAR_1_EAST)),
        ("after-year-9999-in-utc", InvalidInputError, lambda s: s.list(scope, after=_YEAR_9999_WEST)),
        (
            "filter-year-1-in-utc",
            FilterError,
            lambda s: s.count(scope, filter={"created_at": {"$gt": _YEAR_1_EAST}}),
        ),
        (
            "filter-iso-year-9999-in-utc",
            FilterError,
            lambda s: s.list(scope, filter={"created_at": {"$lt": "9999-12-31T23:00:00-14:00"}}),
        ),
        (
            "record-year-1-in-utc",
            InvalidInputError,
            lambda s: s.add([make_record(scope).model_copy(update={"created_at": _YEAR_1_EAST})]),
        ),
    ]


_YEAR_1_EAST = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14)))
_YEAR_9999_WEST = datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-14)))


_CASE_NAMES = [name for name, _, _ in _bad_calls(Scope(tenant="names"))]


class BadInputTests(StoreFixtures):
    """Each bad call raises its typed error and changes nothing stored."""

    @pytest.mark.parametrize("case", _CASE_NAMES)
    def test_bad_input_is_refused_and_changes_nothing(self, store: Store, case: str) -> None:
        scope = new_scope()
        existing = [make_record(scope, f"kept {i}") for i in range(3)]
        store.add(existing, random_vectors(3))
        before = snapshot(store)
        _, error, call = next(c for c in _bad_calls(scope) if c[0] == case)
        with pytest.raises(error):
            call(store)
        assert snapshot(store) == before
        assert store.dimension == DIM

    def test_invalid_scopes_and_records_are_typed_errors(self) -> None:
        for value in ("", "..", ".", "a/b", "a\\b", "x" * 129, "tab\t", "ü"):
            with pytest.raises(ScopeError):
                Scope(tenant=value)
        with pytest.raises(ScopeError):
            Scope()
        with pytest.raises(InvalidInputError):
            Message(role="robot", content="x")
        with pytest.raises(InvalidInputError):
            MemoryRecord(
                scope=Scope(tenant="t"), message=Message(role="user", content="x"), metadata={"n": 2**63}
            )

    def test_admin_scope_cannot_own_a_record(self, store: Store) -> None:
        record = MemoryRecord.model_construct(
            id=make_record(new_scope()).id,
            scope=Scope.everything(),
            message=Message(role="user", content="x"),
            created_at=make_record(new_scope()).created_at,
            metadata={},
            kind="turn",
        )
        with pytest.raises(ScopeError):
            store.add([record])
        assert store.count(Scope.everything()) == 0

    def test_the_store_keeps_its_own_copy_of_records(self, store: Store) -> None:
        scope = new_scope()
        record = make_record(scope, metadata={"topic": "work", "tags": ["a"]})
        store.add([record])
        record.metadata["topic"] = "changed"
        assert store.count(scope, filter={"metadata.topic": "work"}) == 1

    def test_numpy_vectors_are_accepted(self, store: Store) -> None:
        scope = new_scope()
        store.add([make_record(scope)], np.ones((1, DIM), dtype=np.float64))
        assert store.search(scope, vector=np.ones(DIM, dtype=np.float16), limit=1)[0].score == pytest.approx(
            1.0
        )


class ClosedStoreTests(StoreFixtures):
    """After ``close`` every call raises StoreClosedError; close itself is idempotent."""

    def test_calls_after_close_raise(self, store: Store) -> None:
        scope = new_scope()
        record = make_record(scope)
        store.add([record], random_vectors(1))
        store.close()
        store.close()
        calls: list[Callable[[], object]] = [
            lambda: store.add([make_record(scope)]),
            lambda: store.get(scope, [record.id]),
            lambda: store.vectors(scope, [record.id]),
            lambda: store.list(scope),
            lambda: store.search(scope, vector=random_vectors(1)[0]),
            lambda: store.count(scope),
            lambda: store.delete(scope, [record.id]),
            lambda: store.delete_where(scope, {}),
            lambda: store.purge(),
        ]
        for call in calls:
            with pytest.raises(StoreClosedError):
                call()

    def test_context_manager_closes(self, store: Store) -> None:
        with store as opened:
            opened.count(new_scope())
        with pytest.raises(StoreClosedError):
            store.count(new_scope())
