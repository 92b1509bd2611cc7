"""The portable filter language: parsing, and the reference evaluator.

Filters are Mongo-style dicts validated into a small immutable AST::

    {"role": "user"}                                  # $eq by default
    {"metadata.topic": {"$in": ["work", "travel"]}}
    {"$or": [{"kind": "summary"}, {"created_at": {"$gte": "2026-01-01T00:00:00Z"}}]}
    {"$not": {"metadata.tags": {"$contains": "secret"}}}

Fields: ``role``, ``kind``, ``created_at``, ``expires_at`` and ``metadata.<key>``
(a record without ``expires_at`` compares as :data:`memcore.records.NEVER_EXPIRES`). Scope fields
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

import math
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeAlias

from memcore.errors import FilterError
from memcore.records import (
    INT64_MAX,
    INT64_MIN,
    METADATA_KEY,
    ROLE_NAMES,
    MemoryRecord,
    MetadataValue,
    epoch_micros,
    in_utc,
)
from memcore.scope import SCOPE_FIELDS

Scalar: TypeAlias = str | int | float | bool | datetime
"""A value a comparison compares against."""

RANGE_OPS: frozenset[str] = frozenset({"$gt", "$gte", "$lt", "$lte"})
LOGICAL_OPS: frozenset[str] = frozenset({"$and", "$or", "$not"})
ROLES: frozenset[str] = frozenset(ROLE_NAMES)
METADATA_PREFIX = "metadata."
MAX_DEPTH = 32
"""How deeply filters may nest; deeper ones raise FilterError (they are not written by hand)."""
MAX_FILTER_TERMS = 1024
"""The most values one filter may compare against: a comparison counts one, ``$in`` and ``$nin``
one per value. Every backend serves any filter within it (natively, in chunks or exactly), so
none is handed an expression its engine crashes on or refuses."""

FieldType = Literal["role", "string", "datetime", "metadata"]
"""How a field's values are typed: ``role`` one of :data:`ROLES`; ``string`` any string (``kind``);
``datetime`` an aware datetime (``created_at``); ``metadata`` a metadata value (string, number,
boolean or list of strings), possibly missing."""

Operand = Literal["scalar", "list", "bool", "string"]
"""What an operator takes: one value of the field's type, a list of them, true/false, or a string."""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """A filterable field: its name (``metadata.`` for every metadata key), type and value.

    Backends dispatch on :attr:`type`, never on the name: a ``role`` or ``string`` field is a
    keyword column, a ``datetime`` field an integer column of epoch microseconds (see
    :func:`column_values`), each stored under the field's name; ``metadata`` is the backend's own
    typed layout. A field added to :data:`FIELDS` is then stored, filtered and indexed everywhere.

    :param read: ``read(record, field)``, the field's value in a record, or :data:`MISSING`.
    """

    name: str
    type: FieldType
    read: Callable[[MemoryRecord, str], object]

    @property
    def is_keyword(self) -> bool:
        """Whether the field is a string every record has (``role``, ``kind``): a keyword column."""
        return self.type in ("role", "string")

    @property
    def is_time(self) -> bool:
        """Whether the field is a datetime every record has (``created_at``): a microsecond column."""
        return self.type == "datetime"

    @property
    def is_metadata(self) -> bool:
        """Whether this is the spec of every ``metadata.<key>`` field."""
        return self.type == "metadata"

    def metadata_key(self, field: str) -> str:
        """The metadata key of the field ``field`` (``metadata.topic``: ``topic``)."""
        return field[len(METADATA_PREFIX) :]


@dataclass(frozen=True, slots=True)
class Operator:
    """A comparison operator: what it takes, on which fields, and what it means.

    :param matches: the reference semantics, ``matches(stored, value)``, where ``stored`` is the
        record's value of the field or :data:`MISSING`.
    :param field_types: the field types it applies to.
    """

    name: str
    operand: Operand
    field_types: frozenset[FieldType]
    matches: Callable[[Any, Any], bool]


@dataclass(frozen=True, slots=True)
class Comparison:
    """``field op value``. ``value`` is a tuple for ``$in``/``$nin``, a bool for ``$exists``."""

    field: str
    op: str
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
        operator = OPERATORS.get(node.op)
        if operator is None:
            raise FilterError(f"{node.field}: unknown operator {_shown(node.op)}")
        value = (
            list(node.value) if operator.operand == "list" and isinstance(node.value, tuple) else node.value
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
        elif op in OPERATORS:
            clauses.append(_comparison(field, op, value))
        else:
            raise FilterError(
                f"{field}: unknown operator {_shown(op)}; use one of {sorted([*OPERATORS, '$not'])}"
            )
    return clauses[0] if len(clauses) == 1 else And(tuple(clauses))


def field_spec(field: str) -> FieldSpec:
    """The :class:`FieldSpec` of a filter field name.

    :raises FilterError: for a field no filter may test (scope fields included: the scope is the
        call's own argument).
    """
    spec = FIELDS.get(field)
    if spec is not None:
        return spec
    if field.startswith(METADATA_PREFIX) and METADATA_KEY.fullmatch(field[len(METADATA_PREFIX) :]):
        return METADATA_FIELD
    bare = field.removeprefix("scope.")
    if bare in SCOPE_FIELDS:
        raise FilterError(
            f"{field!r} is a scope field: pass the scope as the call's scope argument, "
            "never inside the filter"
        )
    raise FilterError(f"unknown filter field {field!r}; use {', '.join(FIELDS)} or metadata.<key>")


def _check_field(field: str) -> None:
    field_spec(field)


def _comparison(field: str, op: str, value: Any) -> Comparison:
    spec, operator = field_spec(field), OPERATORS[op]
    if spec.type not in operator.field_types:
        raise FilterError(f"{op} applies to {', '.join(sorted(operator.field_types))} fields, not {field}")
    if operator.operand == "bool":
        if not isinstance(value, bool):
            raise FilterError(f"{field}: {op} takes true or false, got {_shown(value)}")
        return Comparison(field, op, value)
    if operator.operand == "string":
        if not isinstance(value, str):
            raise FilterError(f"{field}: {op} takes a string, got {_shown(value)}")
        return Comparison(field, op, value)
    if operator.operand == "list":
        if not isinstance(value, list | tuple):
            raise FilterError(f"{field}: {op} takes a list, got {_shown(value)}")
        if len(value) > MAX_FILTER_TERMS:
            raise FilterError(f"{field}: {op} takes at most {MAX_FILTER_TERMS} values, got {len(value)}")
        return Comparison(field, op, tuple(_scalar(spec, op, item) for item in value))
    scalar = _scalar(spec, op, value)
    if op in RANGE_OPS and (isinstance(scalar, bool | str)):
        raise FilterError(f"{field}: {op} compares numbers or datetimes, got {_shown(value)}")
    return Comparison(field, op, scalar)


def _scalar(spec: FieldSpec, op: str, value: Any) -> Scalar:
    field = spec.name
    if spec.type == "datetime":
        return _datetime(field, op, value)
    if spec.type in ("role", "string"):
        if not isinstance(value, str):
            raise FilterError(f"{field}: {op} takes a string, got {_shown(value)}")
        if spec.type == "role" and value not in ROLES:
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
    """The value of ``field`` (a parsed filter's field name) in ``record``, or :data:`MISSING`."""
    return FIELDS.get(field, METADATA_FIELD).read(record, field)  # type: ignore[return-value]


def is_number(value: object) -> bool:
    """Whether ``value`` is an int or a float (a bool is neither, in filters)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def scalars_equal(stored: object, wanted: Scalar) -> bool:
    """Equality as filters define it: same type, except that ints and floats compare as numbers."""
    if is_number(stored) and is_number(wanted):
        return stored == wanted
    return type(stored) is type(wanted) and stored == wanted


def _equality_key(value: object) -> tuple[object, object]:
    """A hashable key equal for two values exactly when :func:`scalars_equal` holds."""
    return ("number" if is_number(value) else type(value), value)


_KEY_SETS: dict[int, tuple[tuple[Scalar, ...], frozenset[tuple[object, object]]]] = {}
_KEY_SETS_SIZE = 256


def _keys_of(values: tuple[Scalar, ...]) -> frozenset[tuple[object, object]]:
    """The equality keys of an ``$in`` list, computed once per parsed list.

    Cached by the tuple's identity, never its value: ``(1,) == (True,) == (1.0,)`` as tuples, so a
    cache keyed by value (``functools.lru_cache``) would answer ``$in: [1]`` with the keys of an
    earlier ``$in: [true]``. An entry holds its tuple, so its id cannot be reused while cached.
    """
    cached = _KEY_SETS.get(id(values))
    if cached is not None and cached[0] is values:
        return cached[1]
    keys = frozenset(_equality_key(value) for value in values)
    if len(_KEY_SETS) >= _KEY_SETS_SIZE:
        _KEY_SETS.clear()
    _KEY_SETS[id(values)] = (values, keys)
    return keys


def _matches_any(stored: object, values: tuple[Scalar, ...]) -> bool:
    """``$in`` in time independent of the list's length (a filter may hold a thousand values)."""
    if stored is MISSING:
        return False
    keys = _keys_of(values)
    if isinstance(stored, list):
        return any(_equality_key(item) in keys for item in stored)
    return _equality_key(stored) in keys


def _matches_eq(stored: object, wanted: Scalar) -> bool:
    if stored is MISSING:
        return False
    if isinstance(stored, list):
        return any(scalars_equal(item, wanted) for item in stored)
    return scalars_equal(stored, wanted)


def _comparable(stored: object, bound: Scalar) -> bool:
    return (is_number(stored) and is_number(bound)) or (
        isinstance(stored, datetime) and isinstance(bound, datetime)
    )


_EVERY_TYPE: frozenset[FieldType] = frozenset({"role", "string", "datetime", "metadata"})
_ORDERED_TYPES: frozenset[FieldType] = frozenset({"datetime", "metadata"})

OPERATORS: dict[str, Operator] = {
    op.name: op
    for op in (
        Operator("$eq", "scalar", _EVERY_TYPE, _matches_eq),
        Operator("$ne", "scalar", _EVERY_TYPE, lambda stored, value: not _matches_eq(stored, value)),
        Operator("$in", "list", _EVERY_TYPE, _matches_any),
        Operator("$nin", "list", _EVERY_TYPE, lambda stored, values: not _matches_any(stored, values)),
        Operator("$gt", "scalar", _ORDERED_TYPES, lambda s, b: _comparable(s, b) and s > b),
        Operator("$gte", "scalar", _ORDERED_TYPES, lambda s, b: _comparable(s, b) and s >= b),
        Operator("$lt", "scalar", _ORDERED_TYPES, lambda s, b: _comparable(s, b) and s < b),
        Operator("$lte", "scalar", _ORDERED_TYPES, lambda s, b: _comparable(s, b) and s <= b),
        Operator("$exists", "bool", _EVERY_TYPE, lambda stored, value: (stored is not MISSING) is value),
        Operator("$contains", "string", frozenset({"metadata"}), lambda s, v: isinstance(s, list) and v in s),
    )
}
"""Every comparison operator, by name: the parser, the reference evaluator and the test strategies
read this table. A backend's compiler says which of them it expresses natively
(:meth:`memcore.store.BaseStore._expresses`); the store evaluates the others exactly."""

STANDARD_OPERATORS: frozenset[str] = frozenset(OPERATORS)
"""The operators of the language as every built-in compiler knows it. A compiler declares these as
the ones it translates (its ``expresses``); an operator added to :data:`OPERATORS` later is then
declined, and evaluated exactly, until the compiler learns it."""

FIELDS: dict[str, FieldSpec] = {
    spec.name: spec
    for spec in (
        FieldSpec("role", "role", lambda record, _: record.message.role),
        FieldSpec("kind", "string", lambda record, _: record.kind),
        FieldSpec("created_at", "datetime", lambda record, _: record.created_at),
        FieldSpec("expires_at", "datetime", lambda record, _: record.expires),
    )
}
"""The record fields a filter may test besides metadata keys."""

COLUMN_FIELDS: tuple[FieldSpec, ...] = tuple(FIELDS.values())
"""The fields every record has, which backends store as columns (payload keys, flat metadata)."""


def column_values(record: MemoryRecord) -> dict[str, str | int]:
    """The value of every :data:`COLUMN_FIELDS` field of ``record`` as backends store it, by field
    name: a keyword field's string, a time field's epoch microseconds (exact, and ordered as
    integers in every engine)."""
    return {spec.name: column_value(spec, spec.read(record, spec.name)) for spec in COLUMN_FIELDS}


def column_value(spec: FieldSpec, value: object) -> str | int:
    """``value`` (of the column field ``spec``, or a filter's operand for it) as backends store it."""
    if spec.is_time:
        assert isinstance(value, datetime)
        return epoch_micros(value)
    assert isinstance(value, str)
    return value


METADATA_FIELD = FieldSpec(
    METADATA_PREFIX,
    "metadata",
    lambda record, field: record.metadata.get(field[len(METADATA_PREFIX) :], MISSING),
)
"""The spec every ``metadata.<key>`` field shares."""


def _evaluate_comparison(node: Comparison, record: MemoryRecord) -> bool:
    stored = FIELDS.get(node.field, METADATA_FIELD).read(record, node.field)
    return OPERATORS[node.op].matches(stored, node.value)


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


def split_filter(
    node: Filter | None, expresses: Callable[[Comparison], bool]
) -> tuple[Filter | None, Filter | None]:
    """Split ``node`` into what a backend evaluates natively and the residue evaluated exactly.

    Returns ``(native, residue)``: every record matching ``node`` matches ``native``, and it
    matches ``node`` exactly when it also matches ``residue``. A conjunction is split clause by
    clause; any other node goes whole to one side.

    :param expresses: whether the backend evaluates a comparison exactly as :func:`evaluate` does.
    """
    if node is None or _expressed(node, expresses):
        return node, None
    if isinstance(node, And):
        native = [clause for clause in node.clauses if _expressed(clause, expresses)]
        residue = [clause for clause in node.clauses if not _expressed(clause, expresses)]
        return conjunction(native), conjunction(residue)
    return None, node


def _expressed(node: Filter, expresses: Callable[[Comparison], bool]) -> bool:
    if isinstance(node, Comparison):
        return expresses(node)
    if isinstance(node, Not):
        return _expressed(node.clause, expresses)
    return all(_expressed(clause, expresses) for clause in node.clauses)


def conjunction(clauses: Sequence[Filter | None]) -> Filter | None:
    """Every clause holds (``None`` clauses left out): ``None``, the one clause, or an :class:`And`."""
    present = [clause for clause in clauses if clause is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else And(tuple(present))
