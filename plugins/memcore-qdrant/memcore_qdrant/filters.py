"""Compilation of the portable filter language into Qdrant filter conditions.

The compiler produces a small engine-neutral tree (:class:`Clause` and the
``Match*``/:class:`Range`/:class:`HasId` leaves) that mirrors Qdrant's filter
model one to one; :mod:`memcore_qdrant.edge_engine` and
:mod:`memcore_qdrant.client_engine` render it into qdrant-edge-py or
qdrant-client objects. Keeping the tree neutral lets the tests inspect exactly
what reaches Qdrant, and lets both engines share one compiler.

Semantics follow :func:`memcore.filters.evaluate` exactly, using the typed
payload layout of :mod:`memcore_qdrant.payload`:

* ``$eq`` on a string matches ``m_str`` or any element of ``m_list``; on an int,
  ``m_int`` exactly or ``m_float`` by a one-point :class:`Range` (float equality);
  on a float, the reverse; on a bool, the keyword in ``m_bool`` only.
* ``$ne``/``$nin``/``$not`` are ``must_not``, so records lacking the field match;
  ranges look at ``m_int`` and ``m_float`` only, so they never match a missing field.
* ``$in: []`` is :data:`NOTHING` (an empty ``has_id``); a ``should`` is never empty,
  since an empty ``should`` matches everything in Qdrant.
* ``$exists`` matches the key in ``m_keys``, not Qdrant's ``IsEmpty``/``IsNull``: those
  count an empty list as empty, while for the portable language ``[]`` is a value.
* ``expires_at`` is absent from points written before records could expire, and such a record
  never expires: a comparison on it matches the missing key exactly when
  :data:`~memcore.records.NEVER_EXPIRES` passes it (:data:`MISSING_TIMES`). The stores' implicit
  read condition, "not expired at now", compiles to ``must_not: expires_at <= now``.

Qdrant compares ranges in 64-bit floats. A range bound of magnitude 2**53 or
more could compare wrongly with a large stored integer, so :func:`expresses`
declines such comparisons and :class:`memcore.store.BaseStore` evaluates them
exactly, as it does any operator this compiler does not know. The same holds for
``created_at``, stored in integer microseconds: 2**53 µs from 1970 is in the year
2255, so a time range beyond (or before 1685) is exact too, and so are
``list(after=..., before=...)`` bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeAlias
from uuid import UUID

from memcore.filters import (
    RANGE_OPS,
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
from memcore.records import INT64_MAX, INT64_MIN, NEVER_EXPIRES, epoch_micros
from memcore.scope import SCOPE_FIELDS, Scope
from memcore_qdrant import payload as fields

NATIVE_OPERATORS = STANDARD_OPERATORS
"""The operators :func:`compile_filter` translates; others are evaluated by the store."""


@dataclass(frozen=True)
class Match:
    """``FieldCondition(key, match=MatchValue(value))``; on arrays, any element."""

    key: str
    value: str | int


@dataclass(frozen=True)
class MatchAny:
    """``FieldCondition(key, match=MatchAny(values))``; never built with no values."""

    key: str
    values: tuple[str, ...] | tuple[int, ...]


@dataclass(frozen=True)
class MatchSubstring:
    """``FieldCondition(key, match=MatchSubstring(substring))``: byte-wise, case-sensitive."""

    key: str
    substring: str


@dataclass(frozen=True)
class Range:
    """``FieldCondition(key, range=Range(...))``, compared as 64-bit floats."""

    key: str
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None


@dataclass(frozen=True)
class HasId:
    """``HasIdCondition(ids)``; with no ids it matches nothing."""

    ids: tuple[UUID, ...]


@dataclass(frozen=True)
class IsEmpty:
    """``IsEmptyCondition(key)``: the payload field is absent (or null, or an empty list).

    Used for the scope fields an exact scope leaves unset (:meth:`memcore.scope.Scope.exact`):
    a record stores only the scope fields it has, so "unset on the record" is "absent".
    """

    key: str


@dataclass(frozen=True)
class ScopeIs:
    """The record's scope has these field values (and any value for the fields not named).

    Qdrant Edge renders it as one keyword match on ``scope_keys``; a server, as one match per
    field, on the keyword indexes (``tenant`` with ``is_tenant``).
    """

    fields: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Clause:
    """A Qdrant ``Filter``: all of ``must``, at least one of ``should``, none of ``must_not``."""

    must: tuple[Condition, ...] = ()
    should: tuple[Condition, ...] = ()
    must_not: tuple[Condition, ...] = ()


Condition: TypeAlias = Match | MatchAny | MatchSubstring | Range | HasId | IsEmpty | ScopeIs | Clause

NOTHING: Condition = HasId(())
"""A condition no point satisfies."""

EVERYTHING: Condition = Clause(must_not=(NOTHING,))
"""A condition every point satisfies."""


def all_of(conditions: Sequence[Condition]) -> Condition:
    """Every condition holds (one condition stands for itself)."""
    if not conditions:
        return EVERYTHING
    return conditions[0] if len(conditions) == 1 else Clause(must=tuple(conditions))


def any_of(conditions: Sequence[Condition]) -> Condition:
    """At least one condition holds; :data:`NOTHING` for none, never an empty ``should``."""
    if not conditions:
        return NOTHING
    return conditions[0] if len(conditions) == 1 else Clause(should=tuple(conditions))


def flattened(clause: Clause) -> Clause:
    """``clause`` with the clauses among its ``must`` that hold only ``must`` or only ``must_not``
    conditions merged into it (the same filter): Qdrant plans a flat filter better, and every recall
    query carries a ``must_not`` on the role that would otherwise be nested."""
    must: list[Condition] = []
    must_not = list(clause.must_not)
    for condition in clause.must:
        if (
            isinstance(condition, Clause)
            and not condition.should
            and not (condition.must and condition.must_not)
        ):
            inner = flattened(condition)
            must += inner.must
            must_not += inner.must_not
        else:
            must.append(condition)
    return Clause(must=tuple(must), should=clause.should, must_not=tuple(must_not))


def negate(condition: Condition) -> Condition:
    """The condition does not hold."""
    return Clause(must_not=(condition,))


def scope_conditions(scope: Scope) -> list[Condition]:
    """The scope's conditions (none for :meth:`Scope.everything`).

    An exact scope (:meth:`Scope.exact`) adds one :class:`IsEmpty` per scope field it leaves
    unset, so that records of the levels below it (an agent's, a session's) do not match.
    """
    pairs = tuple(scope.items())
    conditions: list[Condition] = [ScopeIs(pairs)] if pairs else []
    if scope.is_exact:
        conditions += [IsEmpty(name) for name in SCOPE_FIELDS if getattr(scope, name) is None]
    return conditions


def scoped(scope: Scope, *conditions: Condition | None) -> Clause:
    """The filter of a read or delete: the scope as top-level ``must`` conditions, then the rest.

    For :meth:`Scope.everything` with no conditions this is the empty clause, which matches every point.
    """
    return Clause(must=(*scope_conditions(scope), *(c for c in conditions if c is not None)))


def expresses(node: Comparison) -> bool:
    """Whether :func:`compile_filter` compiles ``node`` into a condition Qdrant evaluates exactly:
    an operator it knows, and no range bound too large for exact float comparison."""
    if node.op not in NATIVE_OPERATORS:
        return False
    if node.op in RANGE_OPS:
        bound = node.value
        return exact_as_float(epoch_micros(bound) if isinstance(bound, datetime) else bound)
    return True


def compile_filter(node: Filter) -> Condition:
    """Compile a parsed portable filter, every comparison of which :func:`expresses`, into a
    Qdrant condition."""
    if isinstance(node, And):
        return all_of([compile_filter(clause) for clause in node.clauses])
    if isinstance(node, Or):
        return any_of([compile_filter(clause) for clause in node.clauses])
    if isinstance(node, Not):
        return negate(compile_filter(node.clause))
    spec = field_spec(node.field)
    if spec.is_keyword:
        return _keyword_comparison(node)
    if spec.is_time:
        return _time_comparison(spec, node)
    return _metadata_comparison(spec.metadata_key(node.field), node)


def excludes_only(node: Filter) -> bool:
    """Whether ``node`` is made of ``$ne`` and ``$nin`` comparisons alone (or an ``$and`` of them).

    Such a filter usually keeps most of a scope (recall's ``role $nin [system, ...]``),
    which lets a search check it on the best hits instead of asking Qdrant to
    (see :meth:`memcore_qdrant.store.QdrantStore._search`). ``$not`` is left out: it
    may wrap a selective clause (``$not: {role: user}`` keeps a few percent) or another
    ``$not``.
    """
    if isinstance(node, And):
        return all(excludes_only(clause) for clause in node.clauses)
    return isinstance(node, Comparison) and node.op in ("$ne", "$nin")


def within(node: Filter | None, after: datetime | None, before: datetime | None) -> Filter | None:
    """``node`` and the exclusive ``created_at`` bounds of ``list(after=..., before=...)``, as one filter.

    The bounds become portable comparisons so that they take the same exact
    path as a ``created_at`` range in a filter when they are too far out for floats.
    """
    bounds: list[Filter] = []
    if after is not None:
        bounds.append(Comparison(fields.CREATED_AT, "$gt", after))
    if before is not None:
        bounds.append(Comparison(fields.CREATED_AT, "$lt", before))
    if node is not None:
        bounds.insert(0, node)
    if not bounds:
        return None
    return bounds[0] if len(bounds) == 1 else And(tuple(bounds))


def with_ids(ids: Sequence[UUID]) -> Condition:
    """The records with one of these ids, in whichever scopes (a match on the ``record_id`` field).

    Not :class:`HasId`: a point's id is its record's storage id (:func:`memcore.scope.storage_id`).
    """
    if not ids:
        return NOTHING
    return MatchAny(fields.RECORD_ID, tuple(str(record_id) for record_id in ids))


def text_contains(text: str) -> Condition:
    """Case-insensitive substring search, on the case-folded copy of the content."""
    return MatchSubstring(fields.TEXT, text.casefold())


def _values(node: Comparison) -> tuple[Scalar, ...]:
    assert isinstance(node.value, tuple)
    return node.value


def _keyword_comparison(node: Comparison) -> Condition:
    key, op = node.field, node.op
    if op == "$exists":
        return EVERYTHING if node.value else NOTHING
    if op in ("$eq", "$ne"):
        assert isinstance(node.value, str)
        match = Match(key, node.value)
        return match if op == "$eq" else negate(match)
    # The parser allows no other operator on keyword fields (no ranges, no $contains).
    assert op in ("$in", "$nin"), op
    values = tuple(str(v) for v in _values(node))
    if op == "$in":
        return MatchAny(key, values) if values else NOTHING
    # Not Qdrant's MatchExcept: on fields every record has "not any of" is the same, and Qdrant
    # answers it from the index, more cheaply than MatchExcept, on every recall.
    return negate(MatchAny(key, values)) if values else EVERYTHING


MISSING_TIMES: dict[str, int] = {fields.EXPIRES_AT: epoch_micros(NEVER_EXPIRES)}
"""Time fields a point may lack (written before the field existed), with the value, in epoch
microseconds, that a missing key stands for: a record without ``expires_at`` never expires."""

_COMPLEMENT = {"$gt": "lte", "$gte": "lt", "$lt": "gte", "$lte": "gt"}


def _time_comparison(spec: FieldSpec, node: Comparison) -> Condition:
    """A comparison on a time field, also right on points that lack the field (:data:`MISSING_TIMES`).

    Qdrant matches no range or value on a missing key and every ``must_not`` of one, so where the
    value a missing key stands for passes the comparison, the missing key is added (a range becomes
    the ``must_not`` of its complement, one condition on the integer index: the live condition
    ``expires_at > now`` is ``must_not: expires_at <= now``), and where it fails, excluded.
    """
    key, op = spec.name, node.op
    stored = _stored_time_comparison(spec, node)
    missing_as = MISSING_TIMES.get(key)
    if missing_as is None or op == "$exists":
        return stored
    if op in RANGE_OPS:
        stamp = int(column_value(spec, node.value))
        if _passes(op, missing_as, stamp):
            return negate(Range(key, **{_COMPLEMENT[op]: float(stamp)}))
        return stored  # a range never matches a missing key
    stamps = {int(column_value(spec, v)) for v in (_values(node) if op in ("$in", "$nin") else (node.value,))}
    passes = (missing_as in stamps) == (op in ("$eq", "$in"))
    if op in ("$ne", "$nin"):  # a must_not: it matches a missing key already
        return stored if passes else Clause(must=(stored,), must_not=(IsEmpty(key),))
    return any_of([stored, IsEmpty(key)]) if passes else stored  # a match: it never matches one


def _passes(op: str, value: int, bound: int) -> bool:
    return {"$gt": value > bound, "$gte": value >= bound, "$lt": value < bound, "$lte": value <= bound}[op]


def _stored_time_comparison(spec: FieldSpec, node: Comparison) -> Condition:
    key, op = spec.name, node.op
    if op == "$exists":
        return EVERYTHING if node.value else NOTHING
    if op in ("$in", "$nin"):  # the parser makes every value a datetime
        stamps = tuple(int(column_value(spec, v)) for v in _values(node))
        matched = MatchAny(key, stamps) if stamps else NOTHING
        return matched if op == "$in" else negate(matched)
    stamp = int(column_value(spec, node.value))
    if op == "$eq":
        return Match(key, stamp)  # an integer match: exact
    if op == "$ne":
        return negate(Match(key, stamp))
    # The parser allows no $contains on a time field: a range.
    assert op in RANGE_OPS, op
    return Range(key, **{op[1:]: float(stamp)})


def _metadata_comparison(key: str, node: Comparison) -> Condition:
    op = node.op
    if op == "$exists":
        present = Match(fields.METADATA_KEYS, key)
        return present if node.value else negate(present)
    if op == "$contains":
        assert isinstance(node.value, str)
        return Match(fields.metadata_path(fields.LIST, key), node.value)
    if op in ("$eq", "$ne"):
        assert not isinstance(node.value, tuple | datetime)
        equal = any_of(_equal(key, node.value))
        return equal if op == "$eq" else negate(equal)
    if op in ("$in", "$nin"):
        member = any_of(_equal_any(key, _values(node)))
        return member if op == "$in" else negate(member)
    assert op in RANGE_OPS, op
    bound = node.value
    assert isinstance(bound, int | float) and not isinstance(bound, bool)
    limit = {op[1:]: float(bound)}
    return any_of(
        [
            Range(fields.metadata_path(fields.INT, key), **limit),
            Range(fields.metadata_path(fields.FLOAT, key), **limit),
        ]
    )


def _equal(key: str, value: Scalar) -> list[Condition]:
    """The conditions, any of which makes metadata ``key`` equal ``value``."""
    if isinstance(value, bool):
        return [Match(fields.metadata_path(fields.BOOL, key), fields.bool_keyword(value))]
    if isinstance(value, str):
        return [
            Match(fields.metadata_path(fields.STR, key), value),
            Match(fields.metadata_path(fields.LIST, key), value),
        ]
    if isinstance(value, int):
        found: list[Condition] = [Match(fields.metadata_path(fields.INT, key), value)]
        if float(value) == value:  # exact: Python compares int and float without rounding
            found.append(_float_point(key, float(value)))
        return found
    assert isinstance(value, float)
    found = [_float_point(key, value)]
    if value.is_integer() and INT64_MIN <= value <= INT64_MAX:
        found.append(Match(fields.metadata_path(fields.INT, key), int(value)))
    return found


def _float_point(key: str, value: float) -> Range:
    return Range(fields.metadata_path(fields.FLOAT, key), gte=value, lte=value)


def _equal_any(key: str, values: Sequence[Scalar]) -> list[Condition]:
    """Like :func:`_equal` for ``$in``, with strings and ints merged into ``MatchAny``."""
    strings = tuple(dict.fromkeys(v for v in values if isinstance(v, str)))
    ints = tuple(dict.fromkeys(v for v in values if isinstance(v, int) and not isinstance(v, bool)))
    found: list[Condition] = []
    if strings:
        found += [MatchAny(fields.metadata_path(fields.STR, key), strings)]
        found += [MatchAny(fields.metadata_path(fields.LIST, key), strings)]
    if ints:
        found.append(MatchAny(fields.metadata_path(fields.INT, key), ints))
        found += [_float_point(key, float(v)) for v in ints if float(v) == v]
    # Bools and floats are deduplicated apart: True == 1.0 would merge them in one dict.
    for value in dict.fromkeys(v for v in values if isinstance(v, bool)):
        found += _equal(key, value)
    for number in dict.fromkeys(v for v in values if isinstance(v, float)):
        found += _equal(key, number)
    return found


IndexKind = Literal["keyword", "integer", "float"]
_KIND_OF_GROUP: dict[str, IndexKind] = {
    fields.STR: "keyword",
    fields.LIST: "keyword",
    fields.BOOL: "keyword",
    fields.INT: "integer",
    fields.FLOAT: "float",
}


def metadata_indexes(condition: Condition) -> set[tuple[str, IndexKind]]:
    """The metadata payload paths a condition reads, with the index type that serves each.

    Metadata keys are the user's, so memcore cannot index them ahead; the stores
    index a key the first time a filter reads it (see :meth:`Engine.index_fields`).
    """
    if isinstance(condition, Clause):
        return {
            found
            for part in (*condition.must, *condition.should, *condition.must_not)
            for found in metadata_indexes(part)
        }
    key = getattr(condition, "key", None)
    if not isinstance(key, str) or isinstance(condition, MatchSubstring):
        return set()
    if key == fields.METADATA_KEYS:
        return {(key, "keyword")}
    kind = _KIND_OF_GROUP.get(key.split(".", 1)[0])
    return set() if kind is None or "." not in key else {(key, kind)}
