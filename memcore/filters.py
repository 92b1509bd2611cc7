"""The portable filter language: parsing, and the reference evaluator.

Filters are Mongo-style dicts validated into a small immutable AST::

    {"role": "user"}                                  # $eq by default
    {"metadata.topic": {"$in": ["work", "travel"]}}
    {"$or": [{"kind": "summary"}, {"created_at": {"$gte": "2026-01-01T00:00:00Z"}}]}
    {"$not": {"metadata.tags": {"$contains": "secret"}}}

Fields: ``role``, ``kind``, ``created_at`` and ``metadata.<key>``. Scope fields
are not filterable: the scope is a separate argument of every store call.

Semantics are defined once, by :func:`evaluate`; every backend must return
exactly what it returns (the conformance suite checks this):

* ``$eq`` / ``$in`` compare scalars of the same type; ints and floats compare as
  numbers, booleans only with booleans. On a list field they match when any
  element matches.
* ``$ne`` / ``$nin`` / ``$not`` are the negations of ``$eq`` / ``$in`` / their
  clause, so they match records that lack the field.
* ``$gt`` ``$gte`` ``$lt`` ``$lte`` compare numbers (or ``created_at`` with a
  datetime); they never match a missing field, a string, a boolean or a list.
* ``$exists`` tests presence; ``$contains`` matches a list field holding the string.
* ``$in: []`` matches nothing. ``$and: []``, ``$or: []``, an empty operator dict,
  unknown operators or fields, and values of the wrong type raise
  :class:`~memcore.errors.FilterError`. Nothing is ever dropped or rewritten.
"""

from __future__ import annotations

import functools
import math
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeAlias

from memcore.errors import FilterError
from memcore.records import INT64_MAX, INT64_MIN, METADATA_KEY, MemoryRecord, MetadataValue, in_utc
from memcore.scope import SCOPE_FIELDS

Scalar: TypeAlias = str | int | float | bool | datetime
"""A value a comparison compares against."""

ComparisonOp = Literal["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$contains"]
RANGE_OPS: frozenset[str] = frozenset({"$gt", "$gte", "$lt", "$lte"})
COMPARISON_OPS: frozenset[str] = frozenset({"$eq", "$ne", "$in", "$nin", "$exists", "$contains"} | RANGE_OPS)
LOGICAL_OPS: frozenset[str] = frozenset({"$and", "$or", "$not"})
ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant", "tool"})
METADATA_PREFIX = "metadata."
MAX_DEPTH = 32
"""How deeply filters may nest; deeper ones raise FilterError (they are not written by hand)."""
MAX_FILTER_TERMS = 1024
"""The most values one filter may compare against: a comparison counts one, ``$in`` and ``$nin``
one per value. Every backend serves any filter within it (natively, in chunks or exactly), so
none is handed an expression its engine crashes on or refuses."""


@dataclass(frozen=True, slots=True)
class Comparison:
    """``field op value``. ``value`` is a tuple for ``$in``/``$nin``, a bool for ``$exists``."""

    field: str
    op: ComparisonOp
    value: Scalar | tuple[Scalar, ...]


@dataclass(frozen=True, slots=True)
class And:
    """Every clause matches."""

    clauses: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """At least one clause matches."""

    clauses: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class Not:
    """The clause does not match."""

    clause: Filter


Filter: TypeAlias = Comparison | And | Or | Not
FilterSpec: TypeAlias = Mapping[str, Any]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""What :func:`field_value` returns for a metadata key the record lacks."""


_SHOWN = reprlib.Repr()  # Python 3.11's Repr takes no keyword arguments
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, 60, 60


def _shown(value: object) -> str:
    """``value`` for an error message: bounded in length and depth (a filter may nest 10,000 deep)."""
    return _SHOWN.repr(value)


def parse_filter(spec: FilterSpec | Filter | None) -> Filter | None:
    """Validate a filter dict (or pass through an AST) into an AST.

    :param spec: a filter dict, an already parsed filter, or ``None``.
    :returns: the AST, or ``None`` for ``None`` and ``{}`` (no filter).
    :raises FilterError: if the filter is malformed.
    """
    if spec is None:
        return None
    if isinstance(spec, Comparison | And | Or | Not):
        return _check_terms(_check_node(spec, 0))
    if not isinstance(spec, Mapping):
        raise FilterError(f"a filter is a dict, got {type(spec).__name__}")
    if not spec:
        return None
    return _check_terms(_parse_document(spec, 0))


def count_terms(node: Filter) -> int:
    """How many values ``node`` compares against (see :data:`MAX_FILTER_TERMS`)."""
    if isinstance(node, Comparison):
        return len(node.value) if isinstance(node.value, tuple) else 1
    if isinstance(node, Not):
        return count_terms(node.clause)
    return sum(count_terms(clause) for clause in node.clauses)


def _check_terms(node: Filter) -> Filter:
    terms = count_terms(node)
    if terms > MAX_FILTER_TERMS:
        raise FilterError(
            f"a filter compares against at most {MAX_FILTER_TERMS} values ($in and $nin count one per "
            f"value), this one {terms}; split the query, or store a coarser metadata key to filter on"
        )
    return node


def _check_depth(depth: int) -> int:
    if depth > MAX_DEPTH:
        raise FilterError(f"filters may nest at most {MAX_DEPTH} levels deep")
    return depth + 1


def _check_node(node: Any, depth: int) -> Filter:
    """Validate an AST built by hand exactly as a dict filter is validated."""
    depth = _check_depth(depth)
    if isinstance(node, Comparison):
        _check_field(node.field)
        if node.op not in COMPARISON_OPS:
            raise FilterError(f"{node.field}: unknown operator {node.op!r}")
        value = (
            list(node.value) if node.op in ("$in", "$nin") and isinstance(node.value, tuple) else node.value
        )
        checked = _comparison(node.field, node.op, value)
        if checked != node:
            raise FilterError(f"invalid comparison {_shown(node)}; parse a dict filter instead")
        return node
    if isinstance(node, And | Or):
        if not isinstance(node.clauses, tuple) or not node.clauses:
            raise FilterError(f"{type(node).__name__} needs at least one clause")
        return type(node)(tuple(_check_node(clause, depth) for clause in node.clauses))
    if isinstance(node, Not):
        return Not(_check_node(node.clause, depth))
    raise FilterError(f"not a filter node: {_shown(node)}")


def _parse_document(spec: Any, depth: int) -> Filter:
    depth = _check_depth(depth)
    if not isinstance(spec, Mapping) or not spec:
        raise FilterError(f"expected a non-empty filter dict, got {_shown(spec)}")
    clauses = [_parse_entry(key, value, depth) for key, value in spec.items()]
    return clauses[0] if len(clauses) == 1 else And(tuple(clauses))


def _parse_entry(key: Any, value: Any, depth: int) -> Filter:
    if not isinstance(key, str):
        raise FilterError(f"filter keys are strings, got {_shown(key)}")
    if key in ("$and", "$or"):
        if not isinstance(value, list | tuple) or not value:
            raise FilterError(f"{key} takes a non-empty list of filters, got {_shown(value)}")
        children = tuple(_parse_document(child, depth) for child in value)
        return And(children) if key == "$and" else Or(children)
    if key == "$not":
        return Not(_parse_document(value, depth))
    if key.startswith("$"):
        raise FilterError(f"unknown logical operator {_shown(key)}; use one of {sorted(LOGICAL_OPS)}")
    _check_field(key)
    if isinstance(value, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in value):
        return _parse_operators(key, value, depth)
    return _comparison(key, "$eq", value)


def _parse_operators(field: str, operators: Mapping[str, Any], depth: int) -> Filter:
    depth = _check_depth(depth)
    clauses: list[Filter] = []
    for op, value in operators.items():
        if op == "$not":
            if not isinstance(value, Mapping) or not value:
                raise FilterError(f"{field}: $not takes a non-empty operator dict, got {_shown(value)}")
            clauses.append(Not(_parse_operators(field, value, depth)))
        elif op in COMPARISON_OPS:
            clauses.append(_comparison(field, op, value))
        else:
            raise FilterError(
                f"{field}: unknown operator {_shown(op)}; use one of {sorted(COMPARISON_OPS | {'$not'})}"
            )
    return clauses[0] if len(clauses) == 1 else And(tuple(clauses))


def _check_field(field: str) -> None:
    if field in ("role", "kind", "created_at"):
        return
    if field.startswith(METADATA_PREFIX) and METADATA_KEY.fullmatch(field[len(METADATA_PREFIX) :]):
        return
    bare = field.removeprefix("scope.")
    if bare in SCOPE_FIELDS:
        raise FilterError(
            f"{field!r} is a scope field: pass the scope as the call's scope argument, "
            "never inside the filter"
        )
    raise FilterError(f"unknown filter field {field!r}; use role, kind, created_at or metadata.<key>")


def _comparison(field: str, op: str, value: Any) -> Comparison:
    if op == "$exists":
        if not isinstance(value, bool):
            raise FilterError(f"{field}: $exists takes true or false, got {_shown(value)}")
        return Comparison(field, "$exists", value)
    if op in ("$in", "$nin"):
        if not isinstance(value, list | tuple):
            raise FilterError(f"{field}: {op} takes a list, got {_shown(value)}")
        if len(value) > MAX_FILTER_TERMS:
            raise FilterError(f"{field}: {op} takes at most {MAX_FILTER_TERMS} values, got {len(value)}")
        return Comparison(field, op, tuple(_scalar(field, op, item) for item in value))  # type: ignore[arg-type]
    if op == "$contains":
        if field in ("role", "kind", "created_at"):
            raise FilterError(f"$contains applies to list metadata fields, not {field}")
        if not isinstance(value, str):
            raise FilterError(f"{field}: $contains takes a string, got {_shown(value)}")
        return Comparison(field, "$contains", value)
    scalar = _scalar(field, op, value)
    if op in RANGE_OPS and (isinstance(scalar, bool | str)):
        raise FilterError(f"{field}: {op} compares numbers or datetimes, got {_shown(value)}")
    return Comparison(field, op, scalar)  # type: ignore[arg-type]


def _scalar(field: str, op: str, value: Any) -> Scalar:
    if field == "created_at":
        return _datetime(field, op, value)
    if field in ("role", "kind"):
        if not isinstance(value, str):
            raise FilterError(f"{field}: {op} takes a string, got {_shown(value)}")
        if field == "role" and value not in ROLES:
            raise FilterError(f"role {_shown(value)} is not one of {sorted(ROLES)}")
        return value
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise FilterError(f"{field}: integers must fit in 64 bits, got {value}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FilterError(f"{field}: {op} needs a finite number, got {_shown(value)}")
        return value
    raise FilterError(f"{field}: {op} takes a string, number or boolean, got {_shown(value)}")


def _datetime(field: str, op: str, value: Any) -> datetime:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise FilterError(f"{field}: {op} needs an ISO-8601 datetime, got {_shown(value)}") from None
    if not isinstance(value, datetime):
        raise FilterError(f"{field}: {op} needs a datetime, got {_shown(value)}")
    try:
        return in_utc(value)
    except ValueError as exc:
        raise FilterError(f"{field}: {op} needs a timezone-aware datetime: {exc}") from None


def field_value(record: MemoryRecord, field: str) -> MetadataValue | datetime:
    """The value of ``field`` in ``record``, or :data:`MISSING`."""
    if field == "role":
        return record.message.role
    if field == "kind":
        return record.kind
    if field == "created_at":
        return record.created_at
    value: MetadataValue = record.metadata.get(field[len(METADATA_PREFIX) :], MISSING)
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def scalars_equal(stored: object, wanted: Scalar) -> bool:
    """Equality as filters define it: same type, except that ints and floats compare as numbers."""
    if _is_number(stored) and _is_number(wanted):
        return stored == wanted
    return type(stored) is type(wanted) and stored == wanted


def _equality_key(value: object) -> tuple[object, object]:
    """A hashable key equal for two values exactly when :func:`scalars_equal` holds."""
    return ("number" if _is_number(value) else type(value), value)


@functools.lru_cache(maxsize=256)
def _keys_of(values: tuple[Scalar, ...]) -> frozenset[tuple[object, object]]:
    return frozenset(_equality_key(value) for value in values)


def _matches_any(stored: object, values: tuple[Scalar, ...]) -> bool:
    """``$in`` in time independent of the list's length (a filter may hold a thousand values)."""
    keys = _keys_of(values)
    if isinstance(stored, list):
        return any(_equality_key(item) in keys for item in stored)
    return _equality_key(stored) in keys


def _matches_eq(stored: object, wanted: Scalar) -> bool:
    if isinstance(stored, list):
        return any(scalars_equal(item, wanted) for item in stored)
    return scalars_equal(stored, wanted)


def _matches_range(stored: object, op: str, bound: Scalar) -> bool:
    comparable = (_is_number(stored) and _is_number(bound)) or (
        isinstance(stored, datetime) and isinstance(bound, datetime)
    )
    if not comparable:
        return False
    if op == "$gt":
        return stored > bound  # type: ignore[operator]
    if op == "$gte":
        return stored >= bound  # type: ignore[operator]
    if op == "$lt":
        return stored < bound  # type: ignore[operator]
    return stored <= bound  # type: ignore[operator]


def _evaluate_comparison(node: Comparison, record: MemoryRecord) -> bool:
    stored = field_value(record, node.field)
    present = stored is not MISSING
    op, value = node.op, node.value
    if op == "$exists":
        return present is value
    if op == "$eq":
        return present and _matches_eq(stored, value)  # type: ignore[arg-type]
    if op == "$ne":
        return not (present and _matches_eq(stored, value))  # type: ignore[arg-type]
    if op == "$in":
        return present and _matches_any(stored, value)  # type: ignore[arg-type]
    if op == "$nin":
        return not (present and _matches_any(stored, value))  # type: ignore[arg-type]
    if op == "$contains":
        return isinstance(stored, list) and value in stored
    return present and _matches_range(stored, op, value)  # type: ignore[arg-type]


def evaluate(node: Filter | None, record: MemoryRecord) -> bool:
    """The reference semantics: whether ``record`` matches the parsed filter ``node``."""
    if node is None:
        return True
    if isinstance(node, Comparison):
        return _evaluate_comparison(node, record)
    if isinstance(node, And):
        return all(evaluate(clause, record) for clause in node.clauses)
    if isinstance(node, Or):
        return any(evaluate(clause, record) for clause in node.clauses)
    return not evaluate(node.clause, record)


def filter_records(node: Filter | None, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """The records that match ``node``, in their given order."""
    return [record for record in records if evaluate(node, record)]
