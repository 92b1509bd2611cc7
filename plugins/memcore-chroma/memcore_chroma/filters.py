"""Compile memcore's portable filters into Chroma ``where`` documents.

A compiled filter is always a *superset* of what the reference evaluator
(:func:`memcore.filters.evaluate`) matches, and says whether it is *exact*:

* exact: Chroma's answer is the answer; counts and limits can be pushed down;
* not exact: the store over-fetches candidates with the ``where`` and
  post-filters them with the reference evaluator, so nothing is dropped and
  nothing extra survives.

What is exact (the layout is described in :mod:`memcore_chroma.encoding`):

* ``role``, ``kind``, ``created_at`` and ``expires_at`` (microseconds; every entry holds both,
  see :mod:`memcore_chroma.encoding`): every operator;
* strings: ``$eq``/``$in`` match a scalar or any list element (``m.k`` or
  ``$contains`` on ``l.k``), ``$ne``/``$nin`` their negations (Chroma's ``$ne``,
  ``$nin`` and ``$not_contains`` match records lacking the key, as memcore's do);
* booleans, ``$contains``, ``$exists`` (on ``t.k``);
* numbers of magnitude below 2**53, compared as floats; ranges negate into
  "not a number, or the complementary range".

Numbers at or beyond 2**53 are compared against their float rounding, widened
(``$gt`` becomes ``$gte``) so that no match is lost, and post-filtered; their
``$ne``/``$nin`` are left to the post-filter entirely.

``$not`` is pushed down by De Morgan's laws to the comparisons, which have exact
negations; a negation that cannot be expressed as a superset becomes "anything"
and is post-filtered. An operator this compiler does not know is declined by
:func:`expresses` and evaluated by :class:`memcore.store.BaseStore`; no clause
is ever dropped from the exact answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from memcore.errors import FilterError
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
    evaluate,
    field_spec,
    is_number,
)
from memcore.kit import exact_as_float
from memcore.records import MemoryRecord
from memcore_chroma.encoding import (
    TYPE_LIST,
    TYPE_NUM,
    VALUE_TYPES,
    Where,
    all_of,
    any_of,
    list_key,
    scalar_key,
    type_key,
)

MAX_WHERE_CLAUSES = 256
"""The most comparisons a ``where`` sent to Chroma may hold. Chroma turns each ``$and``/``$or``
clause into one more level of a SQLite expression: from about 990 clauses it raises "Expression
tree is too large" (SQLite's depth limit of 1,000), and from a few thousand the process (embedded,
or ``chroma run``) segfaults. A filter that compiles to more is sent as "anything" (the scope
alone) and evaluated exactly here. One ``$in`` is one clause whatever its length (Chroma takes
about 16,000 values before SQLite runs out of variables; memcore allows 1,024)."""

MAX_LIST_CONTAINS = 32
"""A string ``$in``/``$nin`` of more values than this does not test list elements in Chroma (one
``$contains`` clause per value): it selects records with a list at the key, post-filtered."""

NATIVE_OPERATORS = STANDARD_OPERATORS
"""The operators :func:`compile_filter` translates; others are evaluated by the store."""

_NEGATED_RANGE = {"$gt": "$lte", "$gte": "$lt", "$lt": "$gte", "$lte": "$gt"}
_WIDENED_RANGE = {"$gt": "$gte", "$gte": "$gte", "$lt": "$lte", "$lte": "$lte"}


@dataclass(frozen=True)
class CompiledFilter:
    """A Chroma ``where`` that selects a superset of the matching records.

    :param where: the ``where`` document; ``None`` selects every record.
    :param exact: whether ``where`` selects exactly the matching records.
    :param nothing: whether no record can match (the store need not ask Chroma).
    """

    where: Where | None
    exact: bool = True
    nothing: bool = False

    def admits(self, node: Filter | None, record: MemoryRecord) -> bool:
        """Whether ``record``, selected by :attr:`where`, matches ``node`` (what this was compiled from)."""
        return self.exact or evaluate(node, record)


ANYTHING = CompiledFilter(None)
NOTHING = CompiledFilter(None, nothing=True)


def expresses(node: Comparison) -> bool:
    """Whether :func:`compile_filter` compiles ``node`` (as a superset it post-filters where inexact)."""
    return node.op in NATIVE_OPERATORS


def compile_filter(node: Filter | None) -> CompiledFilter:
    """Compile a parsed filter (``None``: no filter), every comparison of which :func:`expresses`,
    into a Chroma ``where``.

    :raises FilterError: for a node or operator this compiler does not know.
    """
    if node is None:
        return ANYTHING
    compiled = _compile(node, negated=False)
    if compiled.where is not None and clause_count(compiled.where) > MAX_WHERE_CLAUSES:
        return CompiledFilter(None, exact=False, nothing=compiled.nothing)
    return compiled


def clause_count(where: Where) -> int:
    """How many comparisons ``where`` holds (each ``$and``/``$or`` clause is one SQLite level)."""
    total = 0
    for key, value in where.items():
        if key in ("$and", "$or"):
            total += sum(clause_count(clause) for clause in value)
        else:
            total += 1
    return total


def _compile(node: Filter, negated: bool) -> CompiledFilter:
    if isinstance(node, Not):
        return _compile(node.clause, not negated)
    if isinstance(node, And | Or):
        parts = [_compile(clause, negated) for clause in node.clauses]
        # not (a and b) == (not a) or (not b), and the other way round
        return _conjunction(parts) if isinstance(node, And) != negated else _disjunction(parts)
    if isinstance(node, Comparison):
        return _comparison(node, negated)
    raise FilterError(f"the Chroma store cannot compile the filter node {node!r}")


def _conjunction(parts: list[CompiledFilter]) -> CompiledFilter:
    if any(part.nothing for part in parts):
        return NOTHING
    exact = all(part.exact for part in parts)
    return CompiledFilter(all_of([p.where for p in parts if p.where is not None]), exact)


def _disjunction(parts: list[CompiledFilter]) -> CompiledFilter:
    exact = all(part.exact for part in parts)
    live = [part for part in parts if not part.nothing]
    if not live:
        return NOTHING
    if any(part.where is None for part in live):
        return CompiledFilter(None, exact)
    return CompiledFilter(any_of([p.where for p in live if p.where is not None]), exact)


def _comparison(node: Comparison, negated: bool) -> CompiledFilter:
    spec = field_spec(node.field)
    if node.op == "$exists":
        return _exists(spec, node.field, node.value is not negated)
    if not spec.is_metadata:  # a column: stored under its name, as column_value has it
        return _always_present(node.field, node.op, _stored(spec, node.value), negated)
    key = spec.metadata_key(node.field)
    if node.op == "$contains":
        return CompiledFilter({list_key(key): {"$not_contains" if negated else "$contains": node.value}})
    if node.op in ("$eq", "$ne"):
        assert not isinstance(node.value, tuple)
        return _metadata_in(key, (node.value,), negated != (node.op == "$eq"))
    if node.op in ("$in", "$nin"):
        assert isinstance(node.value, tuple)
        return _metadata_in(key, node.value, negated != (node.op == "$in"))
    if node.op in _NEGATED_RANGE:
        return _metadata_range(key, node.op, node.value, negated)
    raise FilterError(f"{node.field}: the Chroma store cannot compile the operator {node.op!r}")


def _stored(spec: FieldSpec, value: Scalar | tuple[Scalar, ...]) -> str | int | tuple[str | int, ...]:
    if isinstance(value, tuple):
        return tuple(column_value(spec, item) for item in value)
    return column_value(spec, value)


def _exists(spec: FieldSpec, field: str, wanted: bool) -> CompiledFilter:
    if not spec.is_metadata:
        return ANYTHING if wanted else NOTHING  # every record has its columns
    key = type_key(spec.metadata_key(field))
    return CompiledFilter({key: {"$in" if wanted else "$nin": list(VALUE_TYPES)}})


def _always_present(
    field: str, op: str, value: str | int | tuple[str | int, ...], negated: bool
) -> CompiledFilter:
    """Comparisons on a field every record has, with a value of the stored type."""
    if op in ("$in", "$nin"):
        assert isinstance(value, tuple)
        keep = negated != (op == "$in")  # True: the field must be one of the values
        if not value:
            return ANYTHING if not keep else NOTHING
        return CompiledFilter({field: {"$in" if keep else "$nin": list(value)}})
    if op in ("$eq", "$ne"):
        return CompiledFilter({field: {"$ne" if negated == (op == "$eq") else "$eq": value}})
    if op in _NEGATED_RANGE:
        return CompiledFilter({field: {_NEGATED_RANGE[op] if negated else op: value}})
    raise FilterError(f"{field}: the Chroma store cannot compile the operator {op!r}")


def _exactly_float(value: Scalar) -> bool:
    return is_number(value) and exact_as_float(value)


def _metadata_in(key: str, values: tuple[Scalar, ...], keep: bool) -> CompiledFilter:
    """``metadata.key`` equal to one of ``values`` (``keep``), or to none of them (``not keep``)."""
    strings = [v for v in values if isinstance(v, str)]
    booleans = [v for v in values if isinstance(v, bool)]
    numbers = [v for v in values if is_number(v)]
    exact = all(_exactly_float(v) for v in numbers)
    if not keep:
        # A superset of "equal to none": leave out the numbers whose float is ambiguous.
        numbers = [v for v in numbers if _exactly_float(v)]
    clauses: list[Where] = []
    scalar = scalar_key(key)
    for group in (strings, booleans, [float(v) for v in numbers]):  # type: ignore[arg-type]
        if group:
            clauses.append({scalar: {"$in" if keep else "$nin": group}})
    if len(strings) > MAX_LIST_CONTAINS:
        # One $contains per value would make the where too large for Chroma: a superset instead.
        exact = False
        if keep:
            clauses.append({type_key(key): TYPE_LIST})
        # not keep: "no list element among them" is left to the post-filter
    else:
        clauses += [{list_key(key): {"$contains" if keep else "$not_contains": s}} for s in strings]
    if keep:
        return CompiledFilter(any_of(clauses), exact) if clauses else NOTHING
    return CompiledFilter(all_of(clauses), exact)


def _metadata_range(key: str, op: str, bound: Scalar | tuple[Scalar, ...], negated: bool) -> CompiledFilter:
    if not is_number(bound):
        raise FilterError(f"metadata.{key}: {op} compares numbers, got {bound!r}")
    assert isinstance(bound, int | float)
    exact = exact_as_float(bound)
    wanted = _NEGATED_RANGE[op] if negated else op
    if not exact:
        # float rounding is monotonic: v > b implies float(v) >= float(b)
        wanted = _WIDENED_RANGE[wanted]
    in_range: Where = {scalar_key(key): {wanted: float(bound)}}
    if not negated:
        return CompiledFilter(in_range, exact)
    # not (v > b): the value is missing, not a number, or v <= b
    return CompiledFilter({"$or": [{type_key(key): {"$ne": TYPE_NUM}}, in_range]}, exact)
