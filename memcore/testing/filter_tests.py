"""Conformance mixins for the portable filter language.

Every backend must return exactly what the reference evaluator
(:func:`memcore.filters.evaluate`) says, on every read and delete path: a fixed
table of filters over records built to hit the edge cases (missing fields,
lists, ints against floats, booleans against numbers), then Hypothesis-generated
records and filter trees.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memcore.filters import OPERATORS, Operator, evaluate, parse_filter
from memcore.records import MemoryRecord, Role
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing.helpers import BASE_TIME, StoreFixtures, make_record, new_scope, random_vectors
from memcore.testing.strategies import filters, record_fields

EXAMPLES = int(os.environ.get("MEMCORE_CONFORMANCE_EXAMPLES", "40"))
"""Hypothesis examples per differential test; raise it for long runs."""

FILTER_CASES: list[tuple[str, dict[str, Any]]] = [
    ("eq-str", {"metadata.s": "x"}),
    ("eq-str-explicit", {"metadata.s": {"$eq": "x"}}),
    ("eq-int", {"metadata.n": 1}),
    ("eq-int-matches-float", {"metadata.n": 1.0}),
    ("eq-float", {"metadata.f": 0.1}),
    ("eq-float-matches-int", {"metadata.f": 2.0}),
    ("eq-bool-true", {"metadata.flag": True}),
    ("eq-bool-false", {"metadata.flag": False}),
    ("eq-bool-not-int", {"metadata.n": True}),
    ("eq-str-not-int", {"metadata.n": "1"}),
    ("eq-list-any-element", {"metadata.tags": "red"}),
    ("ne-str", {"metadata.s": {"$ne": "x"}}),
    ("ne-int", {"metadata.n": {"$ne": 1}}),
    ("ne-list", {"metadata.tags": {"$ne": "red"}}),
    ("gt", {"metadata.n": {"$gt": 1}}),
    ("gte-float-bound", {"metadata.n": {"$gte": 1.5}}),
    ("lt-negative", {"metadata.n": {"$lt": 0}}),
    ("lte-on-floats", {"metadata.f": {"$lte": 0.1}}),
    ("range-both-ends", {"metadata.n": {"$gt": -5, "$lte": 2}}),
    ("range-on-mixed-field", {"metadata.mixed": {"$gte": 1}}),
    ("in-str", {"metadata.s": {"$in": ["x", "y"]}}),
    ("in-mixed", {"metadata.mixed": {"$in": ["1", 2, True]}}),
    ("in-empty", {"metadata.s": {"$in": []}}),
    ("in-list-field", {"metadata.tags": {"$in": ["blue", "green"]}}),
    ("nin-str", {"metadata.s": {"$nin": ["x"]}}),
    ("nin-empty", {"metadata.s": {"$nin": []}}),
    ("nin-list-field", {"metadata.tags": {"$nin": ["red"]}}),
    ("exists", {"metadata.s": {"$exists": True}}),
    ("not-exists", {"metadata.s": {"$exists": False}}),
    ("contains", {"metadata.tags": {"$contains": "red"}}),
    ("contains-on-scalar-field", {"metadata.s": {"$contains": "x"}}),
    ("role", {"role": "assistant"}),
    ("role-in", {"role": {"$in": ["system", "assistant"]}}),
    ("role-nin", {"role": {"$nin": ["user"]}}),
    ("kind", {"kind": "summary"}),
    ("kind-ne", {"kind": {"$ne": "turn"}}),
    ("created-after", {"created_at": {"$gt": (BASE_TIME.replace(minute=3)).isoformat()}}),
    (
        "created-window",
        {"created_at": {"$gte": BASE_TIME.replace(minute=2), "$lt": BASE_TIME.replace(minute=6)}},
    ),
    ("created-eq", {"created_at": BASE_TIME.replace(minute=4)}),
    ("and", {"$and": [{"role": "user"}, {"metadata.n": {"$gte": 1}}]}),
    ("implicit-and", {"role": "user", "metadata.s": "y"}),
    ("or", {"$or": [{"metadata.s": "x"}, {"metadata.flag": True}]}),
    ("not", {"$not": {"metadata.s": "x"}}),
    ("field-not", {"metadata.n": {"$not": {"$gt": 1}}}),
    ("not-or", {"$not": {"$or": [{"kind": "summary"}, {"metadata.n": {"$exists": True}}]}}),
    ("nested", {"$or": [{"$and": [{"role": "user"}, {"$not": {"metadata.tags": "red"}}]}, {"kind": "fact"}]}),
    ("double-not", {"$not": {"$not": {"metadata.flag": False}}}),
]

_FIXTURE_METADATA: list[dict[str, Any]] = [
    {"s": "x", "n": 1, "f": 0.1, "flag": True, "tags": ["red", "blue"], "mixed": 1},
    {"s": "y", "n": 2, "f": 2.0, "flag": False, "tags": [], "mixed": "1"},
    {"s": "z", "n": -3, "f": -0.5, "tags": ["green"], "mixed": True},
    {"s": "x", "n": 1.0, "flag": True, "mixed": 2.5},
    {"n": 0, "f": 0.1, "tags": ["red"], "mixed": [""]},
    {"s": "", "flag": False, "mixed": 2},
    {},
    {"s": "X", "n": 9_007_199_254_740_993, "f": 1e300},
]
_ROLES: list[Role] = ["user", "assistant", "system", "user", "assistant", "user", "developer", "user"]
_KINDS = ["turn", "turn", "summary", "fact", "turn", "summary", "turn", "fact"]


def _fixture_records(scope: Scope) -> list[MemoryRecord]:
    records = []
    for i, metadata in enumerate(_FIXTURE_METADATA):
        record = make_record(scope, f"record {i}", role=_ROLES[i], kind=_KINDS[i])
        record = record.model_copy(
            update={"metadata": metadata, "created_at": BASE_TIME.replace(minute=i + 1)}
        )
        records.append(record)
    return records


STARTS_WITH = Operator(
    "$startswith",
    "string",
    frozenset({"role", "string", "metadata"}),
    lambda stored, prefix: isinstance(stored, str) and stored.startswith(prefix),
)
"""A throwaway operator, known only to the parser and the reference evaluator."""


class FilterTests(StoreFixtures):
    """Each operator, checked against the reference evaluator on list, count, search and delete_where."""

    @pytest.fixture
    def filter_data(self, store: Store) -> tuple[Store, Scope, list[MemoryRecord]]:
        scope, neighbour = new_scope(), new_scope()
        records = _fixture_records(scope)
        store.add(records, random_vectors(len(records), seed=1))
        store.add(_fixture_records(neighbour), random_vectors(len(records), seed=2))
        return store, scope, records

    @pytest.mark.parametrize(
        "spec", [case[1] for case in FILTER_CASES], ids=[case[0] for case in FILTER_CASES]
    )
    def test_filter_matches_reference(
        self, filter_data: tuple[Store, Scope, list[MemoryRecord]], spec: dict[str, Any]
    ) -> None:
        store, scope, records = filter_data
        node = parse_filter(spec)
        expected = {r.id for r in records if evaluate(node, r)}
        assert {r.id for r in store.list(scope, filter=spec)} == expected
        assert store.count(scope, filter=spec) == len(expected)
        hits = store.search(scope, vector=random_vectors(1, seed=3)[0], filter=spec, limit=len(records))
        assert {h.record.id for h in hits} == expected
        assert store.delete_where(scope, spec) == len(expected)
        assert {r.id for r in store.list(scope)} == {r.id for r in records} - expected


@dataclass(frozen=True)
class _Example:
    """One differential example: the records of the queried scope, its neighbours' records, the
    filter and the limit of the limited reads."""

    fields: list[dict[str, Any]]
    neighbour_fields: list[dict[str, Any]]
    spec: dict[str, Any]
    limit: int


def _examples(specs: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[_Example]:
    return st.builds(
        _Example,
        fields=st.lists(record_fields(), min_size=1, max_size=12),
        neighbour_fields=st.lists(record_fields(), max_size=4),
        spec=specs,
        limit=st.integers(min_value=1, max_value=15),
    )


def _differential(examples: int) -> settings:
    """Hypothesis settings of the differential tests: the store fixture lives across examples."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.differing_executors,
        ],
    )


class DifferentialFilterTests(StoreFixtures):
    """Hypothesis: random records and filter trees; the store must agree with the reference.

    Each example writes into a fresh scope and two neighbours (another session
    of the same user and agent; another user of the same tenant) and queries
    the first, so no answer may contain a neighbour's record (or one of any
    earlier example).
    """

    @_differential(EXAMPLES)
    @given(example=_examples(filters()))
    def test_store_agrees_with_reference_evaluator(self, store: Store, example: _Example) -> None:
        _agrees_with_reference(store, example)

    @_differential(max(EXAMPLES // 2, 10))
    @given(
        example=_examples(
            st.tuples(st.sampled_from(["$and", "$or"]), filters(2, ops=(STARTS_WITH,)), filters(4)).map(
                lambda drawn: {drawn[0]: [drawn[1], drawn[2]]}
            )
        )
    )
    def test_an_operator_only_the_reference_evaluator_knows_works_through_the_fallback(
        self, store: Store, example: _Example
    ) -> None:
        """An operator added to :data:`memcore.filters.OPERATORS` alone (no backend compiles it)
        is right on every read path: backends decline it, and the store evaluates it exactly."""
        with extra_operator(STARTS_WITH):
            _agrees_with_reference(store, example)


@contextmanager
def extra_operator(operator: Operator) -> Iterator[None]:
    """Add ``operator`` to :data:`memcore.filters.OPERATORS` for the enclosed block."""
    OPERATORS[operator.name] = operator
    try:
        yield
    finally:
        del OPERATORS[operator.name]


def _agrees_with_reference(store: Store, example: _Example) -> None:
    spec, limit = example.spec, example.limit
    scope = new_scope(user_id="u", agent_id="a", session_id="main")
    neighbours = [
        Scope(tenant=scope.tenant, user_id="u", agent_id="a", session_id="other"),
        Scope(tenant=scope.tenant, user_id="v", agent_id="a", session_id="main"),
    ]
    records = [make_record(scope, f"r{i}", **f) for i, f in enumerate(example.fields)]
    others = [make_record(neighbours[i % 2], f"n{i}", **f) for i, f in enumerate(example.neighbour_fields)]
    store.add(records, random_vectors(len(records), seed=len(records)))
    if others:
        store.add(others, random_vectors(len(others), seed=99))
    node = parse_filter(spec)
    expected = [r for r in sorted(records, key=lambda r: (r.created_at, r.id.int >> 64)) if evaluate(node, r)]
    expected_ids = {r.id for r in expected}

    listed = store.list(scope, filter=spec)
    assert {r.id for r in listed} == expected_ids
    assert [r.created_at for r in listed] == [r.created_at for r in expected]
    assert store.count(scope, filter=spec) == len(expected)
    limited = store.list(scope, filter=spec, limit=limit, order="desc")
    assert [r.created_at for r in limited] == [r.created_at for r in expected[::-1][:limit]]
    hits = store.search(scope, vector=random_vectors(1, seed=7)[0], filter=spec, limit=limit)
    assert len(hits) == min(limit, len(expected))
    assert {h.record.id for h in hits} <= expected_ids
    keyword_hits = store.search(scope, keywords="r0 r1 r2 r3", filter=spec, limit=limit)
    assert {h.record.id for h in keyword_hits} <= expected_ids
    assert store.delete_where(scope, spec) == len(expected)
    assert store.count(scope) == len(records) - len(expected)
    assert sum(store.count(n) for n in neighbours) == len(others)
