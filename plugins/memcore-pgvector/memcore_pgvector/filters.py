"""The portable filter (:mod:`memcore.filters`) compiled into a SQL condition with bound parameters.

No value and no key is ever part of the SQL text: every one is a parameter
(``%s``), and the SQL is assembled from fixed fragments only. The semantics are
those of :func:`memcore.filters.evaluate`, exactly:

* the fields every record has (``role``, ``kind``; ``created_at`` and ``expires_at`` in
  integer microseconds, ``expires_at`` :data:`memcore.records.NEVER_EXPIRES` for a record that
  never expires) are columns named after them (:func:`memcore.filters.column_values`);
* metadata lives in one ``jsonb`` column. Equality compares JSON values, which
  keeps types apart (``"1"``, ``1`` and ``true`` differ) while ints and floats
  compare as numbers; on a list, equality matches any element; ranges compare
  numbers only (``numeric``, exact), never strings, booleans or lists;
* every comparison is two-valued (``COALESCE(..., false)``), so ``NOT`` and
  ``$ne``/``$nin`` match records that lack the field, as the reference does.

One comparison is not compiled: a number of magnitude 2**53 or more compared with
metadata. Floats are stored as their shortest decimal text, which beyond 2**53
is not the float's exact value, so ``numeric`` would compare them differently
from Python. :func:`expresses` declines it, as it declines an operator this
compiler does not know, and :class:`memcore.store.BaseStore` evaluates it exactly.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from memcore.filters import (
    STANDARD_OPERATORS,
    And,
    Comparison,
    FieldSpec,
    Filter,
    Not,
    Or,
    Scalar,
    column_value,
    field_spec,
)
from memcore.kit import exact_as_float
from memcore.scope import SCOPE_FIELDS, Scope

Condition = tuple[str, list[Any]]
"""SQL text made of fixed fragments and ``%s`` placeholders, and the values they bind."""

_RANGE_SQL = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def scope_condition(scope: Scope) -> Condition:
    """The scope as equality on its columns (``Scope.everything()``: no condition).

    An exact scope (:meth:`Scope.exact`) names all four columns: its unset fields must be NULL on
    the row (``agent_id IS NULL``), so it matches its own level only, never the levels below it.
    """
    if scope.is_everything and not scope.is_exact:
        return "TRUE", []
    # Column names come from memcore's fixed list of scope fields, never from the caller.
    if scope.is_exact:
        fields = [(name, getattr(scope, name)) for name in SCOPE_FIELDS]
        parts = [f"{name} IS NULL" if value is None else f"{name} = %s" for name, value in fields]
        return " AND ".join(parts), [value for _, value in fields if value is not None]
    pairs = scope.items()
    return " AND ".join(f"{name} = %s" for name, _ in pairs), [value for _, value in pairs]


NATIVE_OPERATORS = STANDARD_OPERATORS
"""The operators :func:`compile_filter` translates; others are evaluated by the store."""


def expresses(node: Comparison) -> bool:
    """Whether :func:`compile_filter` compiles ``node`` into SQL that compares exactly: an operator
    it knows, and no metadata number beyond the float-exact range."""
    return node.op in NATIVE_OPERATORS and (
        not field_spec(node.field).is_metadata or exact_as_float(node.value)
    )


def compile_filter(node: Filter | None) -> Condition:
    """The SQL condition that matches exactly the records ``node`` matches; every comparison of
    ``node`` must be one that :func:`expresses`."""
    if node is None:
        return "TRUE", []
    if isinstance(node, And | Or):
        parts = [compile_filter(clause) for clause in node.clauses]
        joiner = " AND " if isinstance(node, And) else " OR "
        return "(" + joiner.join(sql for sql, _ in parts) + ")", [v for _, values in parts for v in values]
    if isinstance(node, Not):
        sql, values = compile_filter(node.clause)
        return f"(NOT {sql})", values
    return _comparison(node)


def _comparison(node: Comparison) -> Condition:
    spec = field_spec(node.field)
    if not spec.is_metadata:
        return _column_comparison(spec, node)
    key = spec.metadata_key(node.field)
    op, value = node.op, node.value
    if op == "$exists":
        return ("(metadata ? %s)" if value else "(NOT metadata ? %s)"), [key]
    if op == "$contains":
        return (
            "COALESCE(jsonb_typeof(metadata -> %s) = 'array'"
            " AND metadata -> %s @> jsonb_build_array(%s::text), false)",
            [key, key, value],
        )
    if op in ("$eq", "$ne"):
        sql, values = _equals(key, value)  # type: ignore[arg-type]
        return (sql if op == "$eq" else f"(NOT {sql})"), values
    if op in ("$in", "$nin"):
        assert isinstance(value, tuple)
        if not value:
            return ("FALSE" if op == "$in" else "TRUE"), []
        sql, values = _equals_any(key, value)
        return (sql if op == "$in" else f"(NOT {sql})"), values
    return (
        f"(CASE WHEN jsonb_typeof(metadata -> %s) = 'number' "
        f"THEN (metadata ->> %s)::numeric {_RANGE_SQL[op]} %s::numeric ELSE false END)",
        [key, key, _number(value)],  # type: ignore[arg-type]
    )


def _equals(key: str, value: Scalar) -> Condition:
    """``metadata.key == value`` as the reference defines it, never NULL."""
    wanted = Jsonb(value)
    return (
        "COALESCE(metadata -> %s = %s::jsonb OR (jsonb_typeof(metadata -> %s) = 'array'"
        " AND metadata -> %s @> jsonb_build_array(%s::jsonb)), false)",
        [key, wanted, key, key, wanted],
    )


def _equals_any(key: str, values: tuple[Scalar, ...]) -> Condition:
    """``metadata.key`` equal to any of ``values`` (as :func:`_equals` defines it), with the values
    bound as one ``jsonb[]`` parameter: a list of any length is five parameters, never one per value
    (PostgreSQL takes at most 65,535 per statement)."""
    wanted = [Jsonb(value) for value in values]
    return (
        "COALESCE(metadata -> %s = ANY(%s::jsonb[]) OR (jsonb_typeof(metadata -> %s) = 'array'"
        " AND EXISTS (SELECT FROM jsonb_array_elements(metadata -> %s) AS element"
        " WHERE element = ANY(%s::jsonb[]))), false)",
        [key, wanted, key, key, wanted],
    )


def _number(value: int | float) -> str:
    """A bound for ``numeric``: the exact text of an int, the shortest round-trip text of a float,
    as the stored JSON has it (so that a float compares equal to itself)."""
    return repr(value) if isinstance(value, float) else str(value)


def _column_comparison(spec: FieldSpec, node: Comparison) -> Condition:
    # The column is named after a field of memcore's fixed table, never after caller input.
    column, op, value = spec.name, node.op, node.value
    if op == "$exists":
        return ("TRUE" if value else "FALSE"), []

    def stored(item: Any) -> str | int:
        return column_value(spec, item)

    if op in ("$in", "$nin"):
        assert isinstance(value, tuple)
        if not value:
            return ("FALSE" if op == "$in" else "TRUE"), []
        sql = f"{column} = ANY(%s)"
        return (sql if op == "$in" else f"(NOT {sql})"), [[stored(v) for v in value]]
    if op == "$eq":
        return f"{column} = %s", [stored(value)]
    if op == "$ne":
        return f"{column} <> %s", [stored(value)]
    return f"{column} {_RANGE_SQL[op]} %s", [stored(value)]
