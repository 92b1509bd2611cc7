"""An exact, in-memory record index partitioned by scope.

The engine behind the built-in stores. Records are grouped into one partition
per concrete scope; each partition keeps its vectors in one contiguous float32
matrix, so a scoped search is a single matrix-vector product over that scope's
rows, never a Python loop over records. A query scope that leaves fields unset
covers several partitions; they are found through a per-field value index.

Not thread-safe by itself: stores wrap every call in their own lock.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from uuid import UUID

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

from memcore.errors import DimensionMismatchError, IdConflictError
from memcore.filters import Filter, evaluate
from memcore.records import MemoryRecord, ScoredRecord
from memcore.scope import SCOPE_FIELDS, Scope
from memcore.store import Order, text_matches
from memcore.stores.partition import Partition, timestamp_micros
from memcore.validation import Matrix

ScopeKey = tuple[str | None, str | None, str | None, str | None]

_blas: ThreadpoolController | None = None


def single_blas_thread() -> AbstractContextManager[object]:
    """Run numpy's BLAS on one thread for the enclosed block.

    A scoped search is a matrix-vector product over at most a few tens of
    thousands of rows: one thread does it in well under a millisecond, while a
    multi-threaded BLAS competes for the cores with the embedding model (and
    everything else) and turns it into a latency spike. Global settings are
    left alone; the limit holds only inside the block.
    """
    global _blas
    if _blas is None:
        _blas = ThreadpoolController()
    return _blas.limit(limits=1, user_api="blas")  # type: ignore[no-any-return]


class ScopedIndex:
    """Records and their unit vectors, partitioned by scope, answering exact queries."""

    def __init__(self, dimension: int | None = None) -> None:
        self.dimension = dimension
        self._partitions: dict[ScopeKey, Partition] = {}
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

    def _new_partition(self, scope: Scope) -> Partition:
        key = scope.as_tuple()
        partition = Partition(scope, self.dimension or 1)
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

    def partitions(self, scope: Scope) -> Iterator[Partition]:
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
        masks = [p.mask(node) for p in parts]
        exact = all(m is not None for m in masks)
        if len(parts) == 1:
            rows = parts[0].rows_in_order(order, after_us, before_us)
            if exact:
                rows = rows[masks[0][rows]][:limit]  # type: ignore[index]
            candidates: Iterator[MemoryRecord] = (parts[0].records[row] for row in rows)
        else:
            candidates = self._merged_in_order(parts, masks if exact else None, order, after_us, before_us)
        if exact:
            return list(itertools.islice(candidates, limit))
        result: list[MemoryRecord] = []
        for record in candidates:
            if limit is not None and len(result) >= limit:
                break
            if evaluate(node, record):
                result.append(record)
        return result

    @staticmethod
    def _merged_in_order(
        parts: list[Partition],
        masks: list[npt.NDArray[np.bool_] | None] | None,
        order: Order,
        after: int | None,
        before: int | None,
    ) -> Iterator[MemoryRecord]:
        if not parts:
            return iter(())
        stamps = np.concatenate([p.timestamps[: p.size] for p in parts])
        keys = np.concatenate([p.id_keys[: p.size] for p in parts])
        owners = np.concatenate([np.full(p.size, i, dtype=np.intp) for i, p in enumerate(parts)])
        rows = np.concatenate([np.arange(p.size, dtype=np.intp) for p in parts])
        selected = np.ones(len(stamps), dtype=bool)
        if masks is not None:
            selected = np.concatenate(masks)  # type: ignore[arg-type]
        if after is not None:
            selected &= stamps > after
        if before is not None:
            selected &= stamps < before
        candidates = np.flatnonzero(selected)
        positions = candidates[np.lexsort((keys[candidates], stamps[candidates]))]
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
        masks = [p.mask(node) for p in parts]
        exact = all(m is not None for m in masks)
        with single_blas_thread():
            scores = np.concatenate([p.vectors[: p.size] @ vector for p in parts])
        owners = np.concatenate([np.full(p.size, i, dtype=np.intp) for i, p in enumerate(parts)])
        rows = np.concatenate([np.arange(p.size, dtype=np.intp) for p in parts])
        usable = np.concatenate([p.has_vector[: p.size] for p in parts])
        if exact:
            usable &= np.concatenate(masks)  # type: ignore[arg-type]
        candidates = np.flatnonzero(usable)
        if exact and text is None and len(candidates) > limit:
            top = np.argpartition(-scores[candidates], limit - 1)[:limit]
            candidates = candidates[top]
        ranked = candidates[np.argsort(-scores[candidates], kind="stable")]
        hits: list[ScoredRecord] = []
        for position in ranked:
            record = parts[owners[position]].records[rows[position]]
            if text is not None and not text_matches(text, record.message.content):
                continue
            if not exact and not evaluate(node, record):
                continue
            score = float(np.clip(scores[position], -1.0, 1.0))
            hits.append(ScoredRecord(record=record, score=score))
            if len(hits) == limit:
                break
        return hits

    def count(self, scope: Scope, node: Filter | None) -> int:
        total = 0
        for partition in self.partitions(scope):
            mask = partition.mask(node)
            if mask is not None:
                total += int(mask.sum())
            else:
                total += sum(1 for record in partition.records if evaluate(node, record))
        return total

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
