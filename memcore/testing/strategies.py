"""Hypothesis strategies for records and portable filters.

Values are drawn from small pools so that filters and records collide often
enough for matches, misses and type mismatches all to be exercised.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import strategies as st

from memcore.filters import FIELDS, METADATA_PREFIX, OPERATORS, RANGE_OPS, FieldType, Operator, field_spec
from memcore.records import ROLE_NAMES, MetadataValue
from memcore.testing.helpers import BASE_TIME

METADATA_KEYS = ("a", "b", "c")
STRINGS = ("x", "y", "z", "")
ROLES = ROLE_NAMES
KINDS = ("turn", "summary", "fact")

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


_FIELDS = (*FIELDS, *(f"{METADATA_PREFIX}{k}" for k in METADATA_KEYS))
"""Every field of the filter table, and the metadata keys the drawn records use."""
_PREFIXES = (*STRINGS, "us", "as", "tu", "fa")
"""Strings for a string operand: metadata strings, and prefixes of roles and kinds."""


def _values_of(field_type: FieldType, op: str) -> st.SearchStrategy[Any]:
    if field_type == "role":
        return st.sampled_from(ROLES)
    if field_type == "string":
        return st.sampled_from(KINDS)
    if field_type == "datetime":
        return st.integers(min_value=0, max_value=20).map(_minute)
    if op in RANGE_OPS:
        return st.one_of(st.integers(-3, 3), st.sampled_from([-1.5, 0.5, 1.0, 2.5]))
    return scalar_values


@st.composite
def comparisons(draw: st.DrawFn, ops: tuple[Operator, ...] | None = None) -> dict[str, Any]:
    """One ``{field: {op: value}}`` comparison, valid by the language's rules.

    Operators come from :data:`memcore.filters.OPERATORS` (those applying to the drawn field),
    so an operator added to that table is drawn too.

    :param ops: draw only these operators (and only fields they apply to), which need not be in
        the table yet.
    """
    wanted = tuple(OPERATORS.values()) if ops is None else ops
    fields = [f for f in _FIELDS if any(field_spec(f).type in o.field_types for o in wanted)]
    field = draw(st.sampled_from(fields))
    field_type = field_spec(field).type
    operator = draw(st.sampled_from([o for o in wanted if field_type in o.field_types]))
    op, operand = operator.name, operator.operand
    values = _values_of(field_type, op)
    if operand == "bool":
        operators: dict[str, Any] = {op: draw(st.booleans())}
    elif operand == "list":
        operators = {op: draw(st.lists(values, max_size=3))}
    elif operand == "string":
        operators = {op: draw(st.sampled_from(_PREFIXES))}
    else:
        operators = {op: draw(values)}
    if field_type == "metadata" and op in RANGE_OPS and draw(st.booleans()):
        other = draw(st.sampled_from(sorted(RANGE_OPS - {op})))
        operators[other] = draw(values)  # a range with both ends, one field, one dict
    if draw(st.integers(min_value=0, max_value=4)) == 0:
        operators = {"$not": operators}  # the field-level $not
    return {field: operators}


def filters(
    max_leaves: int = 6, ops: tuple[Operator, ...] | None = None
) -> st.SearchStrategy[dict[str, Any]]:
    """Random filter trees of comparisons under ``$and``, ``$or`` and ``$not``.

    :param ops: the operators of the comparisons (all of :data:`memcore.filters.OPERATORS` by default).
    """
    return st.recursive(
        comparisons(ops),
        lambda children: st.one_of(
            st.lists(children, min_size=1, max_size=3).map(lambda c: {"$and": c}),
            st.lists(children, min_size=1, max_size=3).map(lambda c: {"$or": c}),
            children.map(lambda c: {"$not": c}),
        ),
        max_leaves=max_leaves,
    )
