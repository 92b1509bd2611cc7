"""``example://``: records in a dict, vectors in a dict, brute-force cosine search.

Written only against memcore's public API, as a third-party plugin would be:
:class:`~memcore.store.BaseStore` validates every argument and hands over
clean input (unit-length float32 vectors, parsed filters, UTC datetimes); this
class stores it, applies the scope and evaluates filters with the reference
evaluator. A record is its scope plus its id, so both dicts are keyed by
:func:`~memcore.scope.storage_id`.
"""

from __future__ import annotations

import threading
from typing import ClassVar, Self
from uuid import UUID

import numpy as np
import numpy.typing as npt

from memcore.filters import Filter, evaluate
from memcore.kit import check_same_dimension, clamp_score, order_key
from memcore.queries import ListQuery, SearchQuery
from memcore.records import MemoryRecord, ScoredRecord
from memcore.scope import Scope, storage_id
from memcore.store import BaseStore, Capabilities, text_matches
from memcore.urls import StoreURL
from memcore.validation import Matrix


def _key(record: MemoryRecord) -> UUID:
    return storage_id(record.scope, record.id)


class ExampleStore(BaseStore):
    """An in-process store, lost when the process ends. Safe to share between threads."""

    name: ClassVar[str] = "example"
    schemes: ClassVar[tuple[str, ...]] = ("example",)
    capabilities: ClassVar[Capabilities] = Capabilities(durable=False)

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.RLock()
        self._records: dict[UUID, MemoryRecord] = {}
        self._vector_of: dict[UUID, npt.NDArray[np.float32]] = {}
        self._dimension: int | None = None

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open a new, empty store; the URL is just ``example://``."""
        url.require_empty_location()
        return cls()

    @property
    def dimension(self) -> int | None:
        with self._lock:
            return self._dimension

    def _visible(self, scope: Scope, node: Filter | None) -> list[MemoryRecord]:
        return [r for r in self._records.values() if scope.matches(r.scope) and evaluate(node, r)]

    def _add(self, records: list[MemoryRecord], vectors: Matrix | None) -> None:
        with self._lock:
            if vectors is not None:
                check_same_dimension(self._dimension, vectors.shape[1])
                self._dimension = vectors.shape[1]
            for row, record in enumerate(records):
                self._records[_key(record)] = record
                if vectors is None:
                    self._vector_of.pop(_key(record), None)
                else:
                    self._vector_of[_key(record)] = vectors[row].copy()

    def _get(self, scope: Scope, ids: list[UUID]) -> list[MemoryRecord]:
        with self._lock:
            wanted = set(ids)
            return [r for r in self._records.values() if r.id in wanted and scope.matches(r.scope)]

    def _vectors(self, scope: Scope, ids: list[UUID]) -> list[tuple[UUID, Matrix]]:
        with self._lock:
            keys = [(r.id, _key(r)) for r in self._get(scope, ids)]
            return [
                (record_id, self._vector_of[key].copy()) for record_id, key in keys if key in self._vector_of
            ]

    def _list(self, scope: Scope, query: ListQuery) -> list[MemoryRecord]:
        after, before = query.after, query.before
        with self._lock:
            records = [
                r
                for r in self._visible(scope, query.filter)
                if (after is None or r.created_at > after) and (before is None or r.created_at < before)
            ]
        records.sort(key=order_key, reverse=query.order == "desc")
        return records[: query.limit]

    def _search(self, scope: Scope, query: SearchQuery) -> list[ScoredRecord]:
        text = query.text
        with self._lock:
            candidates = [
                r
                for r in self._visible(scope, query.filter)
                if text is None or text_matches(text, r.message.content)
            ]
            if query.vector is None:
                candidates.sort(key=order_key, reverse=True)
                return [ScoredRecord.of(r, 1.0) for r in candidates[: query.limit]]
            candidates = sorted((r for r in candidates if _key(r) in self._vector_of), key=order_key)
            if not candidates:
                return []
            matrix = np.stack([self._vector_of[_key(r)] for r in candidates])
        scores = matrix.astype(np.float64) @ query.vector[0].astype(np.float64)
        best = np.argsort(-scores, kind="stable")[: query.limit]
        return [ScoredRecord.of(candidates[i], clamp_score(scores[i])) for i in best]

    def _count(self, scope: Scope, node: Filter | None) -> int:
        with self._lock:
            return len(self._visible(scope, node))

    def _delete(self, scope: Scope, ids: list[UUID]) -> int:
        with self._lock:
            return self._remove(self._get(scope, ids))

    def _delete_where(self, scope: Scope, node: Filter | None) -> int:
        with self._lock:
            return self._remove(self._visible(scope, node))

    def _remove(self, records: list[MemoryRecord]) -> int:
        for record in records:
            del self._records[_key(record)]
            self._vector_of.pop(_key(record), None)
        return len(records)

    def _close(self) -> None:
        with self._lock:
            self._records.clear()
            self._vector_of.clear()
