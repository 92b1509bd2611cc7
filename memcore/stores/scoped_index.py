"""An exact, in-memory record index partitioned by scope.

The engine behind the built-in stores. Records are grouped into one partition
per concrete scope; each partition keeps its vectors in one contiguous float32
matrix, so a scoped search is a single matrix-vector product over that scope's
rows, never a Python loop over records. A query scope that leaves fields unset
covers several partitions; they are found through a per-field value index.

Not thread-safe by itself: stores wrap every call in their own lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from uuid import UUID

import numpy as np
import numpy.typing as npt

from memcore.errors import DimensionMismatchError, IdConflictError
from memcore.filters import Filter, evaluate
from memcore.records import MemoryRecord, ScoredRecord
from memcore.scope import SCOPE_FIELDS, Scope
from memcore.store import Order, text_matches
from memcore.validation import Matrix

ScopeKey = tuple[str | None, str | None, str | None, str | None]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INITIAL_CAPACITY = 16


def timestamp_micros(moment: datetime) -> int:
    """Microseconds since the epoch: an exact, sortable integer for a UTC datetime."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass
class _Partition:
    """The records of one concrete scope, with parallel arrays for fast reads."""

    scope: Scope
    dimension: int
    records: list[MemoryRecord] = field(default_factory=list)
    positions: dict[UUID, int] = field(default_factory=dict)
    vectors: Matrix = field(init=False)
    has_vector: npt.NDArray[np.bool_] = field(init=False)
    timestamps: npt.NDArray[np.int64] = field(init=False)
    id_keys: npt.NDArray[np.uint64] = field(init=False)

    def __post_init__(self) -> None:
        self.vectors = np.zeros((_INITIAL_CAPACITY, self.dimension), dtype=np.float32)
        self.has_vector = np.zeros(_INITIAL_CAPACITY, dtype=bool)
        self.timestamps = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)
        self.id_keys = np.zeros(_INITIAL_CAPACITY, dtype=np.uint64)

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
        self.has_vector = np.resize(self.has_vector, capacity)
        self.timestamps = np.resize(self.timestamps, capacity)
        self.id_keys = np.resize(self.id_keys, capacity)

    def set_dimension(self, dimension: int) -> None:
        """Give a partition created before any vector existed its vector width."""
        if self.dimension != dimension:
            self.dimension = dimension
            self.vectors = np.zeros((len(self.timestamps), dimension), dtype=np.float32)

    def put(self, record: MemoryRecord, vector: Matrix | None) -> None:
        row = self.positions.get(record.id)
        if row is None:
            row = self.size
            self._reserve(row + 1)
            self.records.append(record)
            self.positions[record.id] = row
        else:
            self.records[row] = record
        self.timestamps[row] = timestamp_micros(record.created_at)
        self.id_keys[row] = record.id.int >> 64
        if vector is None:
            self.vectors[row] = 0.0
            self.has_vector[row] = False
        else:
            self.vectors[row] = vector
            self.has_vector[row] = True

    def remove(self, record_id: UUID) -> None:
        """Swap-remove a row, keeping the arrays dense; the freed row is zeroed."""
        row = self.positions.pop(record_id)
        last = self.size - 1
        if row != last:
            moved = self.records[last]
            self.records[row] = moved
            self.positions[moved.id] = row
            self.vectors[row] = self.vectors[last]
            self.has_vector[row] = self.has_vector[last]
            self.timestamps[row] = self.timestamps[last]
            self.id_keys[row] = self.id_keys[last]
        self.records.pop()
        self.vectors[last] = 0.0
        self.has_vector[last] = False

    def rows_in_order(self, order: Order, after: int | None, before: int | None) -> npt.NDArray[np.intp]:
        """Row numbers sorted by (created_at, id), within the optional time bounds."""
        n = self.size
        rows = np.lexsort((self.id_keys[:n], self.timestamps[:n]))
        if after is not None:
            rows = rows[self.timestamps[rows] > after]
        if before is not None:
            rows = rows[self.timestamps[rows] < before]
        return rows[::-1] if order == "desc" else rows


class ScopedIndex:
    """Records and their unit vectors, partitioned by scope, answering exact queries."""

    def __init__(self, dimension: int | None = None) -> None:
        self.dimension = dimension
        self._partitions: dict[ScopeKey, _Partition] = {}
        self._owner: dict[UUID, ScopeKey] = {}
        self._by_field: list[dict[str, set[ScopeKey]]] = [{} for _ in SCOPE_FIELDS]

    def __len__(self) -> int:
        return len(self._owner)

    def scope_of(self, record_id: UUID) -> Scope | None:
        """The scope of a stored record, or ``None`` if there is no such record."""
        key = self._owner.get(record_id)
        return None if key is None else self._partitions[key].scope

    def check_upsert(self, records: list[MemoryRecord], vectors: Matrix | None) -> None:
        """Refuse a batch that would move a record across scopes or change the dimension."""
        if vectors is not None and self.dimension is not None and vectors.shape[1] != self.dimension:
            raise DimensionMismatchError(
                f"vector dimension {vectors.shape[1]} does not match the store's dimension {self.dimension}"
            )
        for record in records:
            owner = self._owner.get(record.id)
            if owner is not None and owner != record.scope.as_tuple():
                raise IdConflictError(f"record id {record.id} is already used by a record of another scope")

    def upsert(
        self,
        records: list[MemoryRecord],
        vectors: Matrix | None,
        has_vector: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        """Insert or replace records; call :meth:`check_upsert` first.

        :param vectors: unit vectors, one row per record, or ``None`` for none.
        :param has_vector: which rows of ``vectors`` are real (all when omitted).
        """
        if vectors is not None and self.dimension is None:
            self.dimension = vectors.shape[1]
            for partition in self._partitions.values():
                partition.set_dimension(self.dimension)
        for row, record in enumerate(records):
            key = record.scope.as_tuple()
            partition = self._partitions.get(key) or self._new_partition(record.scope)
            vector = None
            if vectors is not None and (has_vector is None or has_vector[row]):
                vector = vectors[row]
            partition.put(record, vector)
            self._owner[record.id] = key

    def _new_partition(self, scope: Scope) -> _Partition:
        key = scope.as_tuple()
        partition = _Partition(scope, self.dimension or 1)
        self._partitions[key] = partition
        for index, value in enumerate(key):
            if value is not None:
                self._by_field[index].setdefault(value, set()).add(key)
        return partition

    def _drop_partition(self, key: ScopeKey) -> None:
        del self._partitions[key]
        for index, value in enumerate(key):
            if value is not None:
                keys = self._by_field[index][value]
                keys.discard(key)
                if not keys:
                    del self._by_field[index][value]

    def partitions(self, scope: Scope) -> Iterator[_Partition]:
        """The partitions visible through ``scope``."""
        if scope.is_everything:
            yield from list(self._partitions.values())
            return
        candidates: set[ScopeKey] | None = None
        for index, name in enumerate(SCOPE_FIELDS):
            value = getattr(scope, name)
            if value is None:
                continue
            keys = self._by_field[index].get(value, set())
            candidates = set(keys) if candidates is None else candidates & keys
            if not candidates:
                return
        for key in sorted(candidates or (), key=lambda k: tuple(v or "" for v in k)):
            yield self._partitions[key]

    def get(self, scope: Scope, ids: list[UUID]) -> list[MemoryRecord]:
        found = []
        for record_id in ids:
            key = self._owner.get(record_id)
            if key is None:
                continue
            partition = self._partitions[key]
            if scope.matches(partition.scope):
                found.append(partition.records[partition.positions[record_id]])
        return found

    def records(self, scope: Scope) -> Iterator[MemoryRecord]:
        """Every record visible through ``scope``, in no particular order."""
        for partition in self.partitions(scope):
            yield from partition.records

    def ordered(
        self,
        scope: Scope,
        node: Filter | None,
        order: Order,
        limit: int | None,
        before: datetime | None,
        after: datetime | None,
    ) -> list[MemoryRecord]:
        after_us = None if after is None else timestamp_micros(after)
        before_us = None if before is None else timestamp_micros(before)
        parts = list(self.partitions(scope))
        if len(parts) == 1:
            rows = parts[0].rows_in_order(order, after_us, before_us)
            ordered: Iterator[MemoryRecord] = (parts[0].records[row] for row in rows)
        else:
            ordered = self._merged_in_order(parts, order, after_us, before_us)
        result: list[MemoryRecord] = []
        for record in ordered:
            if limit is not None and len(result) >= limit:
                break
            if node is None or evaluate(node, record):
                result.append(record)
        return result

    @staticmethod
    def _merged_in_order(
        parts: list[_Partition], order: Order, after: int | None, before: int | None
    ) -> Iterator[MemoryRecord]:
        if not parts:
            return iter(())
        stamps = np.concatenate([p.timestamps[: p.size] for p in parts])
        keys = np.concatenate([p.id_keys[: p.size] for p in parts])
        owners = np.concatenate([np.full(p.size, i, dtype=np.intp) for i, p in enumerate(parts)])
        rows = np.concatenate([np.arange(p.size, dtype=np.intp) for p in parts])
        positions = np.lexsort((keys, stamps))
        if after is not None:
            positions = positions[stamps[positions] > after]
        if before is not None:
            positions = positions[stamps[positions] < before]
        if order == "desc":
            positions = positions[::-1]
        return (parts[owners[p]].records[rows[p]] for p in positions)

    def search(
        self, scope: Scope, query: Matrix | None, text: str | None, node: Filter | None, limit: int
    ) -> list[ScoredRecord]:
        if query is None:
            newest = self.ordered(scope, None, "desc", None, None, None)
            matching = (r for r in newest if text is not None and text_matches(text, r.message.content))
            selected = [r for r in matching if node is None or evaluate(node, r)]
            return [ScoredRecord(record=r, score=1.0) for r in selected[:limit]]
        if self.dimension is None:  # bound to an embedder, but no vector written yet
            return []
        parts = [p for p in self.partitions(scope) if p.size]
        if not parts:
            return []
        vector = query[0]
        scores = np.concatenate([p.vectors[: p.size] @ vector for p in parts])
        owners = np.concatenate([np.full(p.size, i, dtype=np.intp) for i, p in enumerate(parts)])
        rows = np.concatenate([np.arange(p.size, dtype=np.intp) for p in parts])
        usable = np.concatenate([p.has_vector[: p.size] for p in parts])
        candidates = np.flatnonzero(usable)
        if node is None and text is None and len(candidates) > limit:
            top = np.argpartition(-scores[candidates], limit - 1)[:limit]
            candidates = candidates[top]
        ranked = candidates[np.argsort(-scores[candidates], kind="stable")]
        hits: list[ScoredRecord] = []
        for position in ranked:
            record = parts[owners[position]].records[rows[position]]
            if text is not None and not text_matches(text, record.message.content):
                continue
            if node is not None and not evaluate(node, record):
                continue
            score = float(np.clip(scores[position], -1.0, 1.0))
            hits.append(ScoredRecord(record=record, score=score))
            if len(hits) == limit:
                break
        return hits

    def count(self, scope: Scope, node: Filter | None) -> int:
        if node is None:
            return sum(p.size for p in self.partitions(scope))
        return sum(1 for record in self.records(scope) if evaluate(node, record))

    def matching_ids(self, scope: Scope, node: Filter | None) -> list[UUID]:
        """Ids of the records visible through ``scope`` that match ``node``."""
        return [r.id for r in self.records(scope) if node is None or evaluate(node, r)]

    def visible_ids(self, scope: Scope, ids: list[UUID]) -> list[UUID]:
        """The subset of ``ids`` that exist and are visible through ``scope``."""
        return [r.id for r in self.get(scope, ids)]

    def remove(self, ids: list[UUID]) -> None:
        """Remove records by id (ids not present are ignored)."""
        for record_id in ids:
            key = self._owner.pop(record_id, None)
            if key is None:
                continue
            partition = self._partitions[key]
            partition.remove(record_id)
            if partition.size == 0:
                self._drop_partition(key)

    def partition_entries(self, scope: Scope) -> list[tuple[MemoryRecord, Matrix | None]]:
        """The records whose scope is exactly ``scope``, each with its unit vector or ``None``."""
        partition = self._partitions.get(scope.as_tuple())
        if partition is None:
            return []
        return [
            (record, partition.vectors[row] if partition.has_vector[row] else None)
            for row, record in enumerate(partition.records)
        ]

    def partition_size(self, scope: Scope) -> int:
        """How many records have exactly ``scope``."""
        partition = self._partitions.get(scope.as_tuple())
        return 0 if partition is None else partition.size
