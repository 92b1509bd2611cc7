"""Hypothesis strategies for records and portable filters.

Values are drawn from small pools so that filters and records collide often
enough for matches, misses and type mismatches all to be exercised.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import strategies as st

from memcore.filters import RANGE_OPS
from memcore.records import MetadataValue
from memcore.testing.helpers import BASE_TIME

METADATA_KEYS = ("a", "b", "c")
STRINGS = ("x", "y", "z", "")
ROLES = ("system", "developer", "user", "assistant", "tool")
KINDS = ("turn", "summary", "fact")
METADATA_OPS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$contains")

scalar_values: st.SearchStrategy[str | int | float | bool] = st.one_of(
    st.sampled_from(STRINGS),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([-1.5, 0.0, 0.5, 1.0, 2.0, 2.5]),
    st.sampled_from([2**53 + 1, -(2**63), 2**63 - 1, 1e300, -1e-300]),
    st.booleans(),
)
metadata_values: st.SearchStrategy[MetadataValue] = st.one_of(
    scalar_values, st.lists(st.sampled_from(STRINGS), max_size=3)
)


@st.composite
def record_fields(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments for a record: role, kind, minute, metadata (keys may be absent)."""
    role = draw(st.sampled_from(("user", "assistant", "system", "developer")))
    return {
        "role": role,
        "kind": draw(st.sampled_from(KINDS)),
        "minute": draw(st.integers(min_value=0, max_value=20)),
        "metadata": draw(st.dictionaries(st.sampled_from(METADATA_KEYS), metadata_values, max_size=3)),
    }


def _minute(value: int) -> str:
    return (BASE_TIME + timedelta(minutes=value)).isoformat()


@st.composite
def comparisons(draw: st.DrawFn) -> dict[str, Any]:
    """One ``{field: {op: value}}`` comparison, valid by the language's rules."""
    field = draw(st.sampled_from(("role", "kind", "created_at", *(f"metadata.{k}" for k in METADATA_KEYS))))
    if field == "role":
        op = draw(st.sampled_from(("$eq", "$ne", "$in", "$nin", "$exists")))
        values: st.SearchStrategy[Any] = st.sampled_from(ROLES)
    elif field == "kind":
        op = draw(st.sampled_from(("$eq", "$ne", "$in", "$nin")))
        values = st.sampled_from(KINDS)
    elif field == "created_at":
        op = draw(st.sampled_from(("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")))
        values = st.integers(min_value=0, max_value=20).map(_minute)
    else:
        op = draw(
            st.sampled_from(
                ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$contains")
            )
        )
        values = scalar_values
        if op in ("$gt", "$gte", "$lt", "$lte"):
            values = st.one_of(st.integers(-3, 3), st.sampled_from([-1.5, 0.5, 1.0, 2.5]))
        elif op == "$contains":
            values = st.sampled_from(STRINGS)
    if op == "$exists":
        operators: dict[str, Any] = {op: draw(st.booleans())}
    elif op in ("$in", "$nin"):
        operators = {op: draw(st.lists(values, max_size=3))}
    else:
        operators = {op: draw(values)}
    if field.startswith("metadata.") and op in RANGE_OPS and draw(st.booleans()):
        other = draw(st.sampled_from(sorted(RANGE_OPS - {op})))
        operators[other] = draw(values)  # a range with both ends, one field, one dict
    if draw(st.integers(min_value=0, max_value=4)) == 0:
        operators = {"$not": operators}  # the field-level $not
    return {field: operators}


def filters(max_leaves: int = 6) -> st.SearchStrategy[dict[str, Any]]:
    """Random filter trees of comparisons under ``$and``, ``$or`` and ``$not``."""
    return st.recursive(
        comparisons(),
        lambda children: st.one_of(
            st.lists(children, min_size=1, max_size=3).map(lambda c: {"$and": c}),
            st.lists(children, min_size=1, max_size=3).map(lambda c: {"$or": c}),
            children.map(lambda c: {"$not": c}),
        ),
        max_leaves=max_leaves,
    )
