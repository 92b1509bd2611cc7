"""``memory://``: an in-process store with exact search. Fast, thread-safe, not durable."""

from __future__ import annotations

import threading
from typing import ClassVar, Self
from uuid import UUID

from memcore.filters import Filter
from memcore.queries import KeywordQuery, ListQuery, SearchQuery
from memcore.records import MemoryRecord, ScoredRecord
from memcore.scope import Scope
from memcore.store import BaseStore, Capabilities
from memcore.stores.scoped_index import ScopedIndex
from memcore.urls import DIMENSION, StoreURL
from memcore.validation import Matrix, check_dimension


class InMemoryStore(BaseStore):
    """Records held in this process's memory, searched exactly with numpy.

    Everything is lost when the process ends. Safe to share between threads.

    :param dimension: fix the vector dimension up front (else the first vector does).
    """

    name: ClassVar[str] = "memory"
    schemes: ClassVar[tuple[str, ...]] = ("memory",)
    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, keyword_index=True, default_recall="hybrid", expiry=True
    )

    def __init__(self, dimension: int | None = None) -> None:
        super().__init__()
        self._lock = threading.RLock()
        self._index = ScopedIndex(check_dimension(dimension))

    url_params: ClassVar[frozenset[str]] = frozenset({DIMENSION})

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``memory://`` (``?dimension=``)."""
        url.require_empty_location()
        return cls(url.positive_int(DIMENSION))

    @property
    def dimension(self) -> int | None:
        return self._index.dimension

    def _add(self, records: list[MemoryRecord], vectors: Matrix | None) -> None:
        with self._lock:
            self._index.check_upsert(vectors)
            self._index.upsert(records, vectors)

    def _get(self, scope: Scope, ids: list[UUID]) -> list[MemoryRecord]:
        with self._lock:
            return self._index.get(scope, ids, self._live_micros())

    def _vectors(self, scope: Scope, ids: list[UUID]) -> list[tuple[UUID, Matrix]]:
        with self._lock:
            return self._index.vectors(scope, ids, self._live_micros())

    def _list(self, scope: Scope, query: ListQuery) -> list[MemoryRecord]:
        with self._lock:
            return self._index.ordered(scope, query, self._live_micros())

    def _search(self, scope: Scope, query: SearchQuery) -> list[ScoredRecord]:
        with self._lock:
            return self._index.search(scope, query, self._live_micros())

    def _keyword_search(self, scope: Scope, query: KeywordQuery) -> list[ScoredRecord]:
        with self._lock:
            hits = self._index.keyword_search(scope, query, self._live_micros())
        return hits if hits is not None else super()._keyword_search(scope, query)

    def _count(self, scope: Scope, node: Filter | None) -> int:
        with self._lock:
            return self._index.count(scope, node, self._live_micros())

    def _delete(self, scope: Scope, ids: list[UUID]) -> int:
        with self._lock:
            visible = self._index.visible_keys(scope, ids)
            self._index.remove(visible)
            return len(visible)

    def _delete_where(self, scope: Scope, node: Filter | None) -> int:
        with self._lock:
            matching = self._index.matching_keys(scope, node)
            self._index.remove(matching)
            return len(matching)

    def _replace(self, old: MemoryRecord, new: MemoryRecord, vector: Matrix | None) -> bool:
        with self._lock:  # check and write as one step: a delete or a write lands before or after both
            if self._index.get(old.scope.exact(), [old.id], self._live_micros()) != [old]:
                return False  # deleted, expired or changed since ``old`` was read
            self._add([new], vector)
            return True

    def _scopes(self, prefix: Scope) -> list[tuple[Scope, int]]:
        with self._lock:
            return self._index.scope_counts(prefix, self._live_micros())

    def _close(self) -> None:
        with self._lock:
            self._index = ScopedIndex(self._index.dimension)
