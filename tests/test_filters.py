"""The filter language: parsing errors, and the reference semantics on hand-checked cases."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memcore.errors import FilterError
from memcore.filters import And, Comparison, Not, Or, evaluate, parse_filter
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope

RECORD = MemoryRecord(
    scope=Scope(tenant="t"),
    message=Message(role="user", content="x"),
    created_at=datetime(2026, 3, 1, tzinfo=UTC),
    metadata={"s": "x", "n": 2, "f": 0.1, "flag": True, "tags": ["red", "blue"], "empty": []},
    kind="fact",
)


def matches(spec: dict[str, Any]) -> bool:
    return evaluate(parse_filter(spec), RECORD)


def test_parse_builds_an_ast() -> None:
    assert parse_filter({"role": "user"}) == Comparison("role", "$eq", "user")
    assert parse_filter({"metadata.n": {"$gt": 1, "$lte": 3}}) == And(
        (Comparison("metadata.n", "$gt", 1), Comparison("metadata.n", "$lte", 3))
    )
    assert parse_filter({"$or": [{"kind": "a"}, {"$not": {"kind": "b"}}]}) == Or(
        (Comparison("kind", "$eq", "a"), Not(Comparison("kind", "$eq", "b")))
    )
    assert parse_filter({"metadata.s": {"$in": ["a", "b"]}}) == Comparison("metadata.s", "$in", ("a", "b"))
    assert parse_filter(None) is None and parse_filter({}) is None


def test_created_at_values_are_normalised_to_utc() -> None:
    node = parse_filter({"created_at": {"$gte": "2026-03-01T01:00:00+01:00"}})
    assert node == Comparison("created_at", "$gte", datetime(2026, 3, 1, tzinfo=UTC))


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"metadata.s": "x"}, True),
        ({"metadata.s": "X"}, False),
        ({"metadata.n": 2.0}, True),
        ({"metadata.n": True}, False),
        ({"metadata.flag": 1}, False),
        ({"metadata.flag": True}, True),
        ({"metadata.f": 0.1}, True),
        ({"metadata.tags": "red"}, True),
        ({"metadata.tags": {"$ne": "red"}}, False),
        ({"metadata.tags": {"$nin": ["green"]}}, True),
        ({"metadata.tags": {"$contains": "blue"}}, True),
        ({"metadata.s": {"$contains": "x"}}, False),
        ({"metadata.empty": {"$exists": True}}, True),
        ({"metadata.empty": "x"}, False),
        ({"metadata.missing": {"$ne": 1}}, True),
        ({"metadata.missing": {"$nin": [1]}}, True),
        ({"metadata.missing": {"$gt": 0}}, False),
        ({"metadata.missing": {"$lte": 0}}, False),
        ({"metadata.missing": {"$not": {"$gt": 0}}}, True),
        ({"metadata.missing": {"$exists": False}}, True),
        ({"metadata.s": {"$gt": 1}}, False),
        ({"metadata.flag": {"$gte": 0}}, False),
        ({"metadata.tags": {"$gte": 0}}, False),
        ({"metadata.n": {"$in": []}}, False),
        ({"metadata.n": {"$nin": []}}, True),
        ({"metadata.n": {"$gt": 1.5, "$lt": 2.5}}, True),
        ({"created_at": {"$lt": "2026-03-01T00:00:01Z"}}, True),
        ({"created_at": "2026-03-01T00:00:00Z"}, True),
        ({"role": {"$exists": True}}, True),
        ({"$and": [{"role": "user"}, {"kind": "fact"}]}, True),
        ({"$or": [{"role": "system"}, {"kind": "turn"}]}, False),
        ({"$not": {"$or": [{"role": "system"}, {"kind": "turn"}]}}, True),
    ],
)
def test_reference_semantics(spec: dict[str, Any], expected: bool) -> None:
    assert matches(spec) is expected


@pytest.mark.parametrize("stored", [1, 1.0, True, 0, False])
def test_in_lists_equal_as_tuples_keep_their_types_apart(stored: object) -> None:
    """``(1,) == (True,) == (1.0,)`` as Python tuples: an ``$in`` evaluated after another list equal to it
    as a tuple must still compare by the language's rules (a number never equals a boolean)."""
    record = RECORD.model_copy(update={"metadata": {"a": stored}})
    for wanted in ([True], [1], [1.0], [False], [0], [0.0], [True], [0]):
        node = parse_filter({"metadata.a": {"$in": wanted}})
        expected = any(
            isinstance(value, bool) == isinstance(stored, bool) and value == stored for value in wanted
        )
        assert evaluate(node, record) is expected, (stored, wanted)
        assert evaluate(parse_filter({"metadata.a": {"$nin": wanted}}), record) is not expected


@pytest.mark.parametrize(
    "spec",
    [
        {"metadata.s": {"$regex": "x"}},
        {"$nor": [{"role": "user"}]},
        {"$or": []},
        {"$and": []},
        {"$or": {"role": "user"}},
        {"$not": {}},
        {"$not": "x"},
        {"metadata.s": {}},
        {"metadata.s": {"$eq": "x", "oops": 1}},
        {"metadata.n": {"$gt": "5"}},
        {"metadata.n": {"$gt": True}},
        {"metadata.n": {"$gt": None}},
        {"metadata.n": {"$gt": float("nan")}},
        {"metadata.n": {"$eq": float("inf")}},
        {"metadata.n": {"$eq": 2**64}},
        {"metadata.n": ["a", "b"]},
        {"metadata.n": {"$in": "ab"}},
        {"metadata.n": {"$in": [["a"]]}},
        {"metadata.n": None},
        {"metadata.n": {"$exists": 1}},
        {"metadata.tags": {"$contains": 1}},
        {"role": {"$contains": "u"}},
        {"role": "robot"},
        {"role": {"$gt": "a"}},
        {"kind": 3},
        {"created_at": {"$gt": "yesterday"}},
        {"created_at": {"$gt": "2026-01-01T00:00:00"}},
        {"created_at": {"$gt": 5}},
        {"content": "x"},
        {"metadata.": 1},
        {"metadata.bad key": 1},
        {"tenant": "t"},
        {"user_id": "u"},
        {"scope.session_id": "s"},
        {"$or": [{"agent_id": "a"}]},
        {1: "x"},
    ],
)
def test_malformed_filters_raise(spec: dict[Any, Any]) -> None:
    with pytest.raises(FilterError):
        parse_filter(spec)


def test_filter_must_be_a_mapping() -> None:
    with pytest.raises(FilterError):
        parse_filter([{"role": "user"}])  # type: ignore[arg-type]


def test_values_nested_ten_thousand_deep_are_a_filter_error_not_a_recursion_error() -> None:
    deep: list[object] = []
    for _ in range(10_000):
        deep = [deep]
    for spec in ({"metadata.a": {"$in": deep}}, {"metadata.a": deep}, {"metadata.a": {"$gt": {"x": deep}}}):
        with pytest.raises(FilterError):
            parse_filter(spec)
