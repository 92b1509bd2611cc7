"""LangGraph's ``filter=`` over item values: checked up front, evaluated as LangGraph's
``InMemoryStore`` does, and narrowed natively where memcore's filters mean the same thing.

LangGraph's semantics (``langgraph.store.memory._compare_values``): each top-level key of the
filter names a key of the value (missing: ``None``); a plain value matches by Python equality
(``1 == 1.0 == True``); a dict whose keys start with ``$`` applies operators (``$eq $ne`` by
equality, ``$gt $gte $lt $lte`` on both sides converted with ``float()``); another dict matches a
dict value key by key (extra keys in the value allowed); a list matches a list of the same length
element by element.

Where ``InMemoryStore`` raises in the middle of a search (an operator it does not know, ``$gt``
against a value ``float()`` refuses), memcore refuses the filter before reading
(:class:`~memcore.errors.FilterError`) when the filter itself is at fault, and treats an item
whose value cannot be compared as not matching.

The native narrowing: top-level string values of up to :data:`MAX_COPIED_CHARS` characters are
copied into the record's metadata (``lg_v_<key>``), so a clause ``{"key": "text"}`` (or
``{"key": {"$eq": "text"}}``) becomes a memcore ``$eq`` on that copy. It is exact because in
Python only a string equals a string; records that could not copy every such value (more than
:data:`MAX_COPIED_KEYS` of them) say so (``lg_vall`` false) and always pass the native part.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from memcore.errors import FilterError
from memcore.filters import MAX_DEPTH, FilterSpec
from memcore.records import MetadataValue

COPY_PREFIX = "lg_v_"
ALL_COPIED_KEY = "lg_vall"
MAX_COPIED_KEYS = 64
"""Top-level string values copied into a record's metadata, at most."""
MAX_COPIED_CHARS = 256
"""The longest string value copied (longer ones are matched in Python only)."""
_COPYABLE_KEY = re.compile(r"[A-Za-z0-9_-]{1,59}")
_EQUALITY = ("$eq", "$ne")
_ORDERING = ("$gt", "$gte", "$lt", "$lte")
OPERATORS = _EQUALITY + _ORDERING
"""The operators LangGraph's filters know."""


def check_filter(spec: object) -> dict[str, Any] | None:
    """``spec`` (a LangGraph ``filter=``) once checked, or ``None`` for no filter.

    :raises FilterError: for a filter that is not a dict of string keys, an unknown operator,
        a comparison against a value ``float()`` refuses, or nesting deeper than memcore's filters.
    """
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise FilterError(f"a LangGraph filter is a dict, got {type(spec).__name__}")
    checked = dict(spec)
    for key, value in checked.items():
        if not isinstance(key, str):
            raise FilterError(f"filter keys are strings, got {key!r}")
        _check_clause(value, 1)
    return checked


def _check_clause(value: object, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise FilterError(f"filters may nest at most {MAX_DEPTH} levels deep")
    if isinstance(value, Mapping):
        keys = list(value)
        if any(isinstance(k, str) and k.startswith("$") for k in keys):
            for operator in keys:
                if operator not in OPERATORS:
                    raise FilterError(
                        f"unknown filter operator {operator!r}; LangGraph's are {' '.join(OPERATORS)}"
                    )
                if operator in _ORDERING and _number(value[operator]) is None:
                    raise FilterError(f"{operator} compares numbers, got {value[operator]!r}")
            return
        for key, part in value.items():
            if not isinstance(key, str):
                raise FilterError(f"filter keys are strings, got {key!r}")
            _check_clause(part, depth + 1)
    elif isinstance(value, (list, tuple)):
        for part in value:
            _check_clause(part, depth + 1)


def matches(value: Mapping[str, Any], spec: Mapping[str, Any] | None) -> bool:
    """Whether an item's ``value`` passes a checked filter, as in LangGraph's ``InMemoryStore``."""
    if not spec:
        return True
    return all(_compare(value.get(key), wanted) for key, wanted in spec.items())


def _compare(item_value: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        if any(k.startswith("$") for k in wanted):
            return all(_apply(item_value, op, operand) for op, operand in wanted.items())
        if not isinstance(item_value, Mapping):
            return False
        return all(_compare(item_value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(item_value, (list, tuple))
            and len(item_value) == len(wanted)
            and all(_compare(i, w) for i, w in zip(item_value, wanted, strict=True))
        )
    return bool(item_value == wanted)


def _apply(item_value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(item_value == operand)
    if operator == "$ne":
        return bool(item_value != operand)
    left, right = _number(item_value), _number(operand)
    if left is None or right is None:
        return False  # InMemoryStore raises here; an item that cannot be compared does not match
    if operator == "$gt":
        return left > right
    if operator == "$gte":
        return left >= right
    if operator == "$lt":
        return left < right
    return left <= right  # $lte


def _number(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]  # what InMemoryStore does, strings included
    except (TypeError, ValueError, OverflowError):
        return None


# -- the native part ---------------------------------------------------------------------------


def _copyable(key: str, value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) <= MAX_COPIED_CHARS
        and "\x00" not in value
        and _COPYABLE_KEY.fullmatch(key) is not None
    )


def copied_values(value: Mapping[str, Any]) -> dict[str, MetadataValue]:
    """The metadata a record carries so that string equality on ``value`` is filtered natively."""
    copies = {f"{COPY_PREFIX}{k}": v for k, v in value.items() if _copyable(k, v)}
    if len(copies) > MAX_COPIED_KEYS:
        return {ALL_COPIED_KEY: False}
    return {**copies, ALL_COPIED_KEY: True}


def native_part(spec: Mapping[str, Any] | None) -> list[FilterSpec]:
    """memcore clauses every item passing ``spec`` passes too (conservative: may pass more)."""
    clauses: list[FilterSpec] = []
    for key, wanted in (spec or {}).items():
        text = wanted
        if isinstance(wanted, Mapping) and "$eq" in wanted:
            text = wanted["$eq"]
        if _copyable(key, text):
            clauses.append(
                {"$or": [{f"metadata.{COPY_PREFIX}{key}": text}, {f"metadata.{ALL_COPIED_KEY}": False}]}
            )
    return clauses
