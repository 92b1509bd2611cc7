"""One metadata key of one partition as typed columns, so a filter on it is a numpy mask.

A metadata value is a string, a number, a boolean or a list of strings
(:mod:`memcore.records`). Each row keeps its value's type in :attr:`MetadataColumn.types`,
numbers and booleans in a float64 column and strings as codes, so ``$eq``, ``$in``,
``$exists`` and the range operators select rows with vectorised comparisons; the few
rows holding a list are tested one by one. The masks mean exactly what
:func:`memcore.filters.evaluate` means: a string never equals a number, a boolean only
equals a boolean, ranges compare numbers only. An int beyond 2**53, which float64
cannot hold exactly, makes numeric tests on its column decline (``None``), and the
caller evaluates those records one by one instead.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from memcore.filters import MISSING, is_number

ABSENT, STRING, BOOLEAN, NUMBER, LIST = 0, 1, 2, 3, 4
"""A row's type code in :attr:`MetadataColumn.types`."""
_EXACT_INTEGERS = 2**53
_RANGES: dict[str, Callable[[Any, Any], Any]] = {
    "$gt": np.greater,
    "$gte": np.greater_equal,
    "$lt": np.less,
    "$lte": np.less_equal,
}

_BOUND_TESTS: dict[str, Callable[[float, float], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}
"""The range operators on one number: a bound is tested without a numpy call."""

Mask = npt.NDArray[np.bool_]


class MetadataColumn:
    """The values of one metadata key, one row per record of a partition."""

    def __init__(self, capacity: int) -> None:
        self.types = np.zeros(capacity, dtype=np.int8)
        self.numbers = np.zeros(capacity, dtype=np.float64)
        self.strings = np.zeros(capacity, dtype=np.int32)
        self.string_codes: dict[str, int] = {}
        self.lists: dict[int, frozenset[str]] = {}
        """The rows holding a list, with its items."""
        self.inexact: set[int] = set()
        """The rows holding an int float64 cannot represent exactly."""
        self.lowest = np.inf
        self.highest = -np.inf
        """Bounds of every number this column has held (never narrowed when one leaves): a range
        outside them matches no row, which a search learns without comparing any."""
        self.number_rows = 0
        """How many rows hold a number other than NaN: when every row of the partition does, a
        range the bounds lie inside matches every row, which a search learns without comparing
        any either."""

    def reserve(self, capacity: int) -> None:
        """Grow to hold ``capacity`` rows (new rows absent)."""
        if capacity > len(self.types):
            self.types = np.resize(self.types, capacity)
            self.types[len(self.numbers) :] = ABSENT
            self.numbers = np.resize(self.numbers, capacity)
            self.strings = np.resize(self.strings, capacity)

    def set(self, row: int, value: object) -> None:
        """Store ``value`` (a metadata value or :data:`MISSING`) as row ``row``."""
        self.clear(row)
        if value is MISSING:
            return
        if isinstance(value, str):
            self.types[row] = STRING
            codes = self.string_codes
            self.strings[row] = codes.setdefault(value, len(codes))
        elif isinstance(value, bool):
            self.types[row], self.numbers[row] = BOOLEAN, float(value)
        elif is_number(value):
            number = float(value)  # type: ignore[arg-type]
            self.types[row], self.numbers[row] = NUMBER, number
            if not math.isnan(number):  # NaN (from a foreign snapshot) lies in no range
                self.number_rows += 1
            self.lowest, self.highest = min(self.lowest, number), max(self.highest, number)
            if _inexact(value):
                self.inexact.add(row)
        else:
            self.types[row] = LIST
            self.lists[row] = frozenset(value)  # type: ignore[call-overload]

    def clear(self, row: int) -> None:
        """Make row ``row`` absent."""
        if self.types[row] == LIST:
            del self.lists[row]
        elif self.types[row] == NUMBER and not math.isnan(self.numbers[row]):
            self.number_rows -= 1
        self.inexact.discard(row)
        self.types[row] = ABSENT

    def move(self, source: int, target: int) -> None:
        """Row ``source``'s value becomes row ``target``'s; ``source`` becomes absent."""
        self.clear(target)
        self.types[target] = self.types[source]
        self.numbers[target] = self.numbers[source]
        self.strings[target] = self.strings[source]
        if self.types[source] == LIST:
            self.lists[target] = self.lists.pop(source)
        if source in self.inexact:
            self.inexact.discard(source)
            self.inexact.add(target)
        self.types[source] = ABSENT

    def mask(self, op: str, value: object, size: int) -> Mask | None:
        """The rows among the first ``size`` that ``op value`` matches; ``None`` when numbers
        beyond 2**53 are involved (the caller evaluates those records exactly instead)."""
        types = self.types[:size]
        if op == "$exists":
            present: Mask = types != ABSENT
            return present if value else ~present
        if op in ("$eq", "$ne", "$in", "$nin"):
            values = value if isinstance(value, tuple) else (value,)
            matches = self._any_equal(values, size)
            if matches is None:
                return None
            return ~matches if op in ("$ne", "$nin") else matches
        if op == "$contains":
            return self._lists_holding((value,), size)
        compare = _RANGES.get(op)
        if compare is None or not is_number(value):
            return None if compare is None else np.zeros(size, dtype=bool)
        if self.inexact or _inexact(value):
            return None
        if not self.may_match(op, value):
            return np.zeros(size, dtype=bool)
        ranged: Mask = (types == NUMBER) & compare(self.numbers[:size], value)
        return ranged

    def may_match(self, op: str, value: object) -> bool:
        """Whether ``op value`` can match a row, answered from the bounds and string codes alone
        (no array is read): ``False`` only when no row matches, so a search skips the partition."""
        return bounds_test(op, value)(self)

    def _any_equal(self, values: tuple[object, ...], size: int) -> Mask | None:
        types = self.types[:size]
        matches = np.zeros(size, dtype=bool)
        strings = [v for v in values if isinstance(v, str)]
        booleans = [float(v) for v in values if isinstance(v, bool)]
        numbers = [v for v in values if is_number(v)]
        if strings:
            table = np.zeros(len(self.string_codes) + 1, dtype=bool)
            for text in strings:
                code = self.string_codes.get(text)
                if code is not None:
                    table[code] = True
            matches |= (types == STRING) & table[self.strings[:size]]
            if self.lists:
                matches |= self._lists_holding(tuple(strings), size)
        if booleans:
            matches |= (types == BOOLEAN) & np.isin(self.numbers[:size], booleans)
        if numbers:
            if self.inexact or any(_inexact(v) for v in numbers):
                return None
            matches |= (types == NUMBER) & np.isin(self.numbers[:size], np.array(numbers, dtype=np.float64))
        return matches

    def _lists_holding(self, values: tuple[object, ...], size: int) -> Mask:
        """The rows holding a list with one of ``values`` among its items."""
        matches = np.zeros(size, dtype=bool)
        wanted = {v for v in values if isinstance(v, str)}
        for row, items in self.lists.items():
            if row < size and not wanted.isdisjoint(items):
                matches[row] = True
        return matches


def bounds_test(op: str, value: object) -> Callable[[MetadataColumn], bool]:
    """:meth:`MetadataColumn.may_match` for ``op value``, with the value checked once: a filtered
    read over a wide scope asks it of every partition's column, so the test itself stays cheap."""
    test = _BOUND_TESTS.get(op)
    if test is not None:
        if not is_number(value):
            return _never
        if _inexact(value):
            return _always
        bound = float(value)  # type: ignore[arg-type]
        # Both bounds failing means every number between them does.
        return lambda column: (
            bool(column.inexact) or test(column.highest, bound) or test(column.lowest, bound)
        )
    if op in ("$eq", "$in"):
        values = value if isinstance(value, tuple) else (value,)
        if all(isinstance(v, str) for v in values):
            return lambda column: bool(column.lists) or any(v in column.string_codes for v in values)
    return _always


def covers_test(op: str, value: object) -> Callable[[MetadataColumn, int], bool]:
    """Whether ``op value`` matches every one of a column's first ``size`` rows, answered from
    its bounds and counts alone: ``True`` only when each of them holds a number (exactly held)
    and the range holds both bounds, so a search takes the partition whole without a mask."""
    test = _BOUND_TESTS.get(op)
    if test is None or not is_number(value) or _inexact(value):
        return _covers_nothing
    bound = float(value)  # type: ignore[arg-type]
    # Both bounds passing means every number between them does.
    return lambda column, size: (
        column.number_rows == size
        and not column.inexact
        and test(column.lowest, bound)
        and test(column.highest, bound)
    )


def _covers_nothing(column: MetadataColumn, size: int) -> bool:
    return False


def _always(column: MetadataColumn) -> bool:
    return True


def _never(column: MetadataColumn) -> bool:
    return False


def _inexact(value: object) -> bool:
    """Whether ``value`` is an int float64 does not hold exactly (floats always compare exactly)."""
    return isinstance(value, int) and abs(value) > _EXACT_INTEGERS
