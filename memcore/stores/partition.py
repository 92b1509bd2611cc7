"""One owner's records in parallel arrays: vectors, times, and session/role/kind columns.

The unit of the built-in stores' index (:mod:`memcore.stores.scoped_index`): all
records of one (tenant, user, agent), whatever their session, so that recall
across an agent's sessions is one matrix-vector product and a session is a mask.
Rows are appended as records arrive; as long as they arrive in time order (the
normal case, since timestamps come from a monotonic clock) the row order *is*
the time order, so "the last 20 records" is a slice, not a sort. Every keyword
field of the filter table (:data:`memcore.filters.COLUMN_FIELDS`: ``role``,
``kind``) has a code column, and ``created_at`` and ``expires_at`` a microsecond column, so
filters on them alone are answered with numpy masks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np
import numpy.typing as npt

from memcore.filters import COLUMN_FIELDS, And, Comparison, Filter, Not
from memcore.queries import Order
from memcore.records import NEVER_EXPIRES, MemoryRecord, epoch_micros
from memcore.scope import Scope
from memcore.stores.keyword_postings import Postings
from memcore.validation import Matrix

_INITIAL_CAPACITY = 16
_CODED_FIELDS = tuple(spec for spec in COLUMN_FIELDS if spec.is_keyword)
_FIELD_CODES: dict[str, dict[str, int]] = {spec.name: {} for spec in _CODED_FIELDS}
_SESSION_CODES: dict[str, int] = {}
_NO_SESSION = -1
_CODES_LOCK = threading.Lock()
_MASKED_OPERATORS = frozenset({"$eq", "$ne", "$in", "$nin", "$exists"})
_NEVER = epoch_micros(NEVER_EXPIRES)
_TIME_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "$eq": np.equal,
    "$ne": np.not_equal,
    "$gt": np.greater,
    "$gte": np.greater_equal,
    "$lt": np.less,
    "$lte": np.less_equal,
}
"""The operators a time field's microsecond column answers with one vectorised comparison."""

RowKey = tuple[str | None, UUID]
"""A record's key within its owner's partition: its session and its id (a record is its scope plus its id)."""


def row_key(record: MemoryRecord) -> RowKey:
    """The key of ``record`` in its partition."""
    return (record.scope.session_id, record.id)


def _code(codes: dict[str, int], value: str) -> int:
    """The code of ``value``, new ones numbered in order. Process-wide and append-only, so codes
    never change meaning; a lock, because ``setdefault(v, len(codes))`` reads the length first, and
    two stores in two threads could give two new values one code (merging two sessions)."""
    code = codes.get(value)
    if code is None:
        with _CODES_LOCK:
            code = codes.setdefault(value, len(codes))
    return code


def _session_code(session_id: str | None) -> int:
    return _NO_SESSION if session_id is None else _code(_SESSION_CODES, session_id)


@dataclass
class Partition:
    """The records of one owner (tenant, user, agent), with parallel arrays for fast reads."""

    dimension: int
    records: list[MemoryRecord] = field(default_factory=list)
    positions: dict[RowKey, int] = field(default_factory=dict)
    vectors: Matrix = field(init=False)
    has_vector: npt.NDArray[np.bool_] = field(init=False)
    timestamps: npt.NDArray[np.int64] = field(init=False)
    expiries: npt.NDArray[np.int64] = field(init=False)
    """Each row's ``expires_at`` in epoch microseconds (:data:`NEVER_EXPIRES` for none)."""
    expiring: int = 0
    """How many rows have an ``expires_at``: while none does, reads skip the expiry mask."""
    id_keys: npt.NDArray[np.uint64] = field(init=False)
    codes: dict[str, npt.NDArray[np.int32]] = field(init=False)
    """A code column per keyword field (:data:`_CODED_FIELDS`), by field name."""
    sessions: npt.NDArray[np.int32] = field(init=False)
    rows_in_time_order: bool = True
    _sorted_rows: npt.NDArray[np.intp] | None = None
    _postings: Postings | None = None

    def __post_init__(self) -> None:
        self.vectors = np.zeros((_INITIAL_CAPACITY, self.dimension), dtype=np.float32)
        self.has_vector = np.zeros(_INITIAL_CAPACITY, dtype=bool)
        self.timestamps = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)
        self.expiries = np.full(_INITIAL_CAPACITY, _NEVER, dtype=np.int64)
        self.id_keys = np.zeros(_INITIAL_CAPACITY, dtype=np.uint64)
        self.codes = {spec.name: np.zeros(_INITIAL_CAPACITY, dtype=np.int32) for spec in _CODED_FIELDS}
        self.sessions = np.zeros(_INITIAL_CAPACITY, dtype=np.int32)

    @property
    def size(self) -> int:
        return len(self.records)

    def _reserve(self, needed: int) -> None:
        capacity = len(self.timestamps)
        if needed <= capacity:
            return
        while capacity < needed:
            capacity *= 2
        grown = np.zeros((capacity, self.dimension), dtype=np.float32)
        grown[: self.size] = self.vectors[: self.size]
        self.vectors = grown
        for name in ("has_vector", "timestamps", "expiries", "id_keys", "sessions"):
            setattr(self, name, np.resize(getattr(self, name), capacity))
        self.codes = {name: np.resize(column, capacity) for name, column in self.codes.items()}

    def set_dimension(self, dimension: int) -> None:
        """Give a partition created before any vector existed its vector width."""
        if self.dimension != dimension:
            self.dimension = dimension
            self.vectors = np.zeros((len(self.timestamps), dimension), dtype=np.float32)

    def put(self, record: MemoryRecord, vector: Matrix | None) -> None:
        """Insert or replace a record (and its unit vector)."""
        stamp, key = epoch_micros(record.created_at), record.id.int >> 64
        key_in_partition = row_key(record)
        row = self.positions.get(key_in_partition)
        if row is None:
            row = self.size
            if row and (stamp, key) < (int(self.timestamps[row - 1]), int(self.id_keys[row - 1])):
                self.rows_in_time_order = False
            self._reserve(row + 1)
            self.records.append(record)
            self.positions[key_in_partition] = row
        else:
            if self._postings is not None:
                self._postings.discard(row, self.records[row].message.content)
            self.records[row] = record
            if stamp != self.timestamps[row]:
                self.rows_in_time_order = False
            self.expiring -= int(self.expiries[row] != _NEVER)
        self._sorted_rows = None
        self.timestamps[row], self.id_keys[row] = stamp, key
        self.expiries[row] = epoch_micros(record.expires)
        self.expiring += int(self.expiries[row] != _NEVER)
        for spec in _CODED_FIELDS:
            value = str(spec.read(record, spec.name))
            self.codes[spec.name][row] = _code(_FIELD_CODES[spec.name], value)
        self.sessions[row] = _session_code(record.scope.session_id)
        self.has_vector[row] = vector is not None
        self.vectors[row] = 0.0 if vector is None else vector
        if self._postings is not None:
            self._postings.add(row, record.message.content)

    def remove(self, key: RowKey) -> None:
        """Swap-remove a row, keeping the arrays dense; the freed row is zeroed."""
        row = self.positions.pop(key)
        last = self.size - 1
        self.expiring -= int(self.expiries[row] != _NEVER)
        if self._postings is not None:
            self._postings.discard(row, self.records[row].message.content)
        if row != last:
            moved = self.records[last]
            if self._postings is not None:
                self._postings.move(last, row, moved.message.content)
            self.records[row] = moved
            self.positions[row_key(moved)] = row
            for array in (
                self.vectors,
                self.has_vector,
                self.timestamps,
                self.expiries,
                self.id_keys,
                self.sessions,
                *self.codes.values(),
            ):
                array[row] = array[last]
            self.rows_in_time_order = False
        self._sorted_rows = None
        self.records.pop()
        self.vectors[last] = 0.0
        self.has_vector[last] = False
        self.expiries[last] = _NEVER

    def live_mask(self, now: int | None) -> npt.NDArray[np.bool_] | None:
        """The rows not expired at ``now`` (epoch microseconds); ``None`` when that is every row
        (or ``now`` is ``None``: no expiry condition)."""
        if now is None or not self.expiring:
            return None
        mask: npt.NDArray[np.bool_] = self.expiries[: self.size] > now
        return mask

    def is_live(self, row: int, now: int | None) -> bool:
        """Whether ``row`` is not expired at ``now`` (``None``: no expiry condition)."""
        return now is None or not self.expiring or bool(self.expiries[row] > now)

    def postings(self) -> Postings:
        """The keyword index of this partition's records, built on first use and kept up to date."""
        if self._postings is None:
            postings = Postings()
            for row, record in enumerate(self.records):
                postings.add(row, record.message.content)
            self._postings = postings
        return self._postings

    def _time_sorted_rows(self) -> npt.NDArray[np.intp]:
        n = self.size
        if self.rows_in_time_order:
            return np.arange(n, dtype=np.intp)
        if self._sorted_rows is None:
            self._sorted_rows = np.lexsort((self.id_keys[:n], self.timestamps[:n]))
        return self._sorted_rows

    def rows_in_order(self, order: Order, after: int | None, before: int | None) -> npt.NDArray[np.intp]:
        """Row numbers sorted by (created_at, id), within the optional (exclusive) time bounds."""
        rows = self._time_sorted_rows()
        stamps = self.timestamps[rows]
        start = 0 if after is None else int(np.searchsorted(stamps, after, side="right"))
        stop = len(rows) if before is None else int(np.searchsorted(stamps, before, side="left"))
        rows = rows[start:stop]
        return rows[::-1] if order == "desc" else rows

    def session_mask(self, scope: Scope) -> npt.NDArray[np.bool_] | None:
        """The rows of ``scope``'s session; ``None`` when the scope names no session (all rows)."""
        if scope.session_id is None:
            return None
        code = _SESSION_CODES.get(scope.session_id, _NO_SESSION - 1)
        mask: npt.NDArray[np.bool_] = self.sessions[: self.size] == code
        return mask

    def exact_session_mask(self, session_id: str | None) -> npt.NDArray[np.bool_]:
        """The rows whose session is exactly ``session_id`` (``None``: rows without a session)."""
        code = _NO_SESSION if session_id is None else _SESSION_CODES.get(session_id, _NO_SESSION - 1)
        mask: npt.NDArray[np.bool_] = self.sessions[: self.size] == code
        return mask

    def mask(self, node: Filter | None) -> npt.NDArray[np.bool_] | None:
        """The rows matching ``node`` as a mask, if it only tests keyword fields; else ``None``."""
        n = self.size
        if node is None:
            return np.ones(n, dtype=bool)
        if isinstance(node, Comparison):
            return self._comparison_mask(node)
        if isinstance(node, Not):
            inner = self.mask(node.clause)
            return None if inner is None else ~inner
        masks = [self.mask(clause) for clause in node.clauses]
        if any(m is None for m in masks):
            return None
        combine = np.logical_and if isinstance(node, And) else np.logical_or
        return combine.reduce([m for m in masks if m is not None])  # type: ignore[no-any-return]

    def _time_column(self, field: str) -> npt.NDArray[np.int64] | None:
        """The microsecond column of a time field (``created_at``, ``expires_at``), if it has one."""
        column = {"created_at": self.timestamps, "expires_at": self.expiries}.get(field)
        return None if column is None else column[: self.size]

    def _comparison_mask(self, node: Comparison) -> npt.NDArray[np.bool_] | None:
        micros = self._time_column(node.field)
        if micros is not None:
            compare = _TIME_COMPARISONS.get(node.op)
            if compare is None or not isinstance(node.value, datetime):
                return None
            return compare(micros, epoch_micros(node.value))  # type: ignore[no-any-return]
        codes = self.codes.get(node.field)
        if codes is None or node.op not in _MASKED_OPERATORS:
            return None
        n = self.size
        if node.op == "$exists":
            return np.full(n, bool(node.value))
        column = codes[:n]
        values = node.value if isinstance(node.value, tuple) else (node.value,)
        lookup = _FIELD_CODES[node.field]
        # A lookup table indexed by code: one gather, where np.isin would sort or compare per value;
        # this runs on every read (recall filters on role, and hybrid recall lists neighbours many times).
        # Every stored code was handed out before this read, so the table covers the column.
        table = np.zeros(len(lookup), dtype=bool)
        for value in values:
            code = lookup.get(str(value))
            if code is not None:  # a value no record has matches nothing
                table[code] = True
        matches: npt.NDArray[np.bool_] = table[column]
        return ~matches if node.op in ("$ne", "$nin") else matches
