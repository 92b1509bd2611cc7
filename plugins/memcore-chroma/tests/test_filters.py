"""compile_filter: the native ``where`` documents, and when they are exact."""

from __future__ import annotations

from typing import Any

import pytest
from memcore_chroma.filters import compile_filter

from memcore.filters import parse_filter


def _compiled(spec: dict[str, Any]) -> tuple[Any, bool, bool]:
    result = compile_filter(parse_filter(spec))
    return result.where, result.exact, result.nothing


def test_string_equality_also_matches_list_elements() -> None:
    assert _compiled({"metadata.s": "x"}) == (
        {"$or": [{"m.s": {"$in": ["x"]}}, {"l.s": {"$contains": "x"}}]},
        True,
        False,
    )


def test_not_is_pushed_down_by_de_morgan() -> None:
    where, exact, _ = _compiled({"$not": {"$or": [{"kind": "summary"}, {"metadata.n": {"$gt": 1}}]}})
    assert where == {
        "$and": [{"kind": {"$ne": "summary"}}, {"$or": [{"t.n": {"$ne": "num"}}, {"m.n": {"$lte": 1.0}}]}]
    }
    assert exact


@pytest.mark.parametrize(
    ("spec", "where", "exact"),
    [
        ({"metadata.n": {"$gt": 2**53}}, {"m.n": {"$gte": float(2**53)}}, False),
        ({"metadata.n": {"$ne": 2**63 - 1}}, None, False),
        ({"metadata.n": {"$nin": [1, 2**60]}}, {"m.n": {"$nin": [1.0]}}, False),
        ({"metadata.n": {"$exists": False}}, {"t.n": {"$nin": ["str", "bool", "num", "list"]}}, True),
        ({"role": {"$nin": []}}, None, True),
    ],
)
def test_what_is_exact(spec: dict[str, Any], where: Any, exact: bool) -> None:
    assert _compiled(spec) == (where, exact, False)


def test_what_matches_nothing_is_not_sent() -> None:
    assert _compiled({"metadata.s": {"$in": []}})[2]
    assert _compiled({"role": {"$exists": False}})[2]
    assert _compiled({"$and": [{"role": "user"}, {"kind": {"$in": []}}]})[2]
    assert not _compiled({"$or": [{"role": "user"}, {"kind": {"$in": []}}]})[2]
