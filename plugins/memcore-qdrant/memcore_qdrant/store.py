"""The Qdrant stores: one implementation over an :class:`~memcore_qdrant.engine.Engine`.

* :class:`QdrantStore` (``qdrant:///path``, ``qdrant://relative/path``): embedded, durable,
  on Qdrant Edge;
* :class:`QdrantMemoryStore` (``qdrant+memory://``): embedded, gone on close;
* :class:`QdrantServerStore` (``qdrant+http(s)://host:port[?collection=name]``): a Qdrant server.

They differ only in how they connect and in their capabilities. Every read and
delete sends the scope as top-level ``must`` conditions (:func:`~memcore_qdrant.filters.scoped`);
a read or delete by id matches the ``record_id`` payload field AND the scope. A vector search whose
filter only excludes (``$ne``/``$nin``, as recall's roles) checks it on the scope's best hits first
(:meth:`QdrantStore._best_hits_passing`). A record is its exact scope plus its id, so a point's id
is :func:`~memcore.scope.storage_id` of the two: the same id in two scopes is two points. Text
search is a case-insensitive substring match on a case-folded copy of the
content, done by Qdrant (``MatchSubstring``).
"""

from __future__ import annotations

import builtins
import os
import threading
from typing import ClassVar, Self
from uuid import UUID

import numpy as np

from memcore.errors import DimensionMismatchError
from memcore.filters import Comparison, Filter, evaluate
from memcore.keywords import idf, terms
from memcore.kit import check_same_dimension, clamp_score, order_key
from memcore.queries import KeywordQuery, ListQuery, Order, SearchQuery
from memcore.records import MemoryRecord, ScoredRecord
from memcore.scope import Scope, storage_id
from memcore.store import BaseStore, Capabilities, VectorSpace
from memcore.urls import COLLECTION, StoreURL
from memcore.validation import Matrix
from memcore_qdrant import payload as fields
from memcore_qdrant.connections import (
    API_KEY_ENV,
    DEFAULT_COLLECTION,
    Connection,
    connect_edge,
    connect_local_client,
    connect_memory,
    connect_server,
)
from memcore_qdrant.engine import Point
from memcore_qdrant.errors import translated
from memcore_qdrant.filters import (
    Clause,
    Condition,
    Match,
    compile_filter,
    excludes_only,
    expresses,
    metadata_indexes,
    scoped,
    text_contains,
    with_ids,
    within,
)
from memcore_qdrant.keywords import query_vector

EXCLUSION_HEADROOM = 2
"""How many times ``limit`` hits a search with an excluding filter reads before checking the filter itself."""
EXCLUSION_MAX_LIMIT = 100
"""Above this limit an excluding filter goes to Qdrant: turning ``EXCLUSION_HEADROOM * limit``
payloads into records in Python costs more than Qdrant's point-by-point check."""


def _records(points: builtins.list[Point]) -> builtins.list[MemoryRecord]:
    return [fields.from_payload(p.payload) for p in points]


def _scored(record: MemoryRecord, score: float) -> ScoredRecord:
    return ScoredRecord.of(record, clamp_score(score))


class QdrantStore(BaseStore):
    """memcore records as Qdrant points, searched by Qdrant.

    Open one with :func:`memcore.open_store` or :meth:`from_url`; or pass a
    :class:`~memcore_qdrant.connections.Connection` (for example
    ``connect_edge(path)``). Safe to share between threads: calls are serialised
    per engine, and every store object of this process on one embedded path
    shares its engine. A second process on the same path gets
    :class:`~memcore.errors.StoreLockedError`.
    """

    name: ClassVar[str] = "qdrant"
    schemes: ClassVar[tuple[str, ...]] = ("qdrant",)
    capabilities: ClassVar[Capabilities] = Capabilities(durable=True, keyword_index=True)

    def __init__(self, connection: Connection) -> None:
        super().__init__()
        self._connection = connection
        self._engine = connection.engine
        self._lock = connection.lock
        self.location = connection.engine.location

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``qdrant:///absolute/path`` or ``qdrant://relative/path`` (``~`` expands)."""
        return cls(connect_edge(os.path.expanduser(url.location())))

    @classmethod
    def open_local_client(cls, path: str | os.PathLike[str]) -> Self:
        """Open ``path`` with qdrant-client's local mode instead of Qdrant Edge.

        For comparisons only (``benchmarks/qdrant_embedded.py``): local mode
        evaluates every filter in Python, point by point.
        """
        return cls(connect_local_client(path))

    @property
    def dimension(self) -> int | None:
        return self._engine.dimension()

    def _expresses(self, comparison: Comparison) -> bool:
        return expresses(comparison)

    def _where(self, scope: Scope, node: Filter | None, *extra: Condition | None) -> Clause:
        """The native filter of a read: scope, then ``extra``, then the compiled filter."""
        if node is None:
            return scoped(scope, *extra)
        condition = compile_filter(node)
        # A metadata key is indexed the first time Qdrant evaluates a filter that reads it:
        # it otherwise checks the payload of every point in scope.
        self._engine.index_fields(metadata_indexes(condition))
        return scoped(scope, *extra, condition)

    def _ordered(self, where: Clause, order: Order, limit: int) -> builtins.list[MemoryRecord]:
        """The first ``limit`` records by (created_at, id): Qdrant orders by time, ties are settled here.

        One point more than asked tells whether the last one shares its time with points left
        out; only then is the tie read whole (times are strictly increasing within a process,
        so that second read is rare).
        """
        first = self._engine.scroll(where, limit=limit + 1, order=order)
        points = {p.id: p for p in first}
        if (
            len(first) > limit
            and first[limit].payload[fields.CREATED_AT] == first[limit - 1].payload[fields.CREATED_AT]
        ):
            boundary = Match(fields.CREATED_AT, first[limit - 1].payload[fields.CREATED_AT])
            tied = Clause(must=(*where.must, boundary), should=where.should, must_not=where.must_not)
            points.update((p.id, p) for p in self._engine.scroll(tied))
        records = sorted(_records(list(points.values())), key=order_key, reverse=order == "desc")
        return records[:limit]

    def _ensure_dimension(self, dimension: int) -> None:
        current = self._engine.dimension()
        if current is None:
            space = self._engine.load_space()
            if space is not None and space.dimension != dimension:
                raise DimensionMismatchError(
                    f"vector dimension {dimension} does not match the bound embedder's {space.dimension}"
                )
            self._engine.add_vectors(dimension)
        else:
            check_same_dimension(current, dimension)

    def _add(self, records: builtins.list[MemoryRecord], vectors: Matrix | None) -> None:
        with self._lock, translated("add records", self.location):
            if vectors is not None:
                self._ensure_dimension(vectors.shape[1])
            points = [
                Point(
                    storage_id(record.scope, record.id),
                    fields.to_payload(record),
                    None if vectors is None else vectors[row].tolist(),
                )
                for row, record in enumerate(records)
            ]
            self._engine.upsert(points)

    def _get(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[MemoryRecord]:
        with self._lock, translated("get records", self.location):
            return _records(self._engine.scroll(scoped(scope, with_ids(ids))))

    def _vectors(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[tuple[UUID, Matrix]]:
        with self._lock, translated("read vectors", self.location):
            points = self._engine.scroll(scoped(scope, with_ids(ids)), with_vectors=True)
        return [
            (fields.from_payload(p.payload).id, np.asarray(p.vector, dtype=np.float32))
            for p in points
            if p.vector is not None
        ]

    def _list(self, scope: Scope, query: ListQuery) -> builtins.list[MemoryRecord]:
        order = query.order
        with self._lock, translated("list records", self.location):
            where = self._where(scope, within(query.filter, query.after, query.before))
            if query.limit is not None:
                return self._ordered(where, order, query.limit)
            return sorted(_records(self._engine.scroll(where)), key=order_key, reverse=order == "desc")

    def _search(self, scope: Scope, request: SearchQuery) -> builtins.list[ScoredRecord]:
        query, text, node, limit = request.vector, request.text, request.filter, request.limit
        substring = None if text is None else text_contains(text)
        with self._lock, translated("search", self.location):
            if query is None:
                where = self._where(scope, node, substring)
                return [ScoredRecord.of(r, 1.0) for r in self._ordered(where, "desc", limit)]
            if self._engine.dimension() is None:
                # Not dead code: BaseStore.search lets a query through when an embedder is bound
                # but no vector was written yet, and Qdrant has no ``dense`` vector to search then.
                return []
            vector = query[0].tolist()
            if node is not None and limit <= EXCLUSION_MAX_LIMIT and excludes_only(node):
                found = self._best_hits_passing(node, vector, scoped(scope, substring), limit)
                if found is not None:
                    return found
            hits = self._engine.query(vector, self._where(scope, node, substring), limit)
            return [_scored(fields.from_payload(h.payload), h.score) for h in hits]

    def _best_hits_passing(
        self, node: Filter, vector: builtins.list[float], where: Clause, limit: int
    ) -> builtins.list[ScoredRecord] | None:
        """The ``limit`` best hits of ``where`` that pass ``node``, if they are among its
        ``EXCLUSION_HEADROOM * limit`` best; ``None`` when too few of those pass.

        For a filter that only excludes: Qdrant Edge checks a ``must_not`` point by point over the
        whole scope, which costs recall's role exclusion more than the scoped search itself, while
        such a filter usually removes few of the best hits. The filter's ranking is the scope's
        with some hits left out, so if enough of the best hits pass, they are the filtered
        search's (up to the order of equal scores, which Qdrant leaves open on both paths); when
        the scope holds fewer hits than were asked for, the ones that pass are all there are. No
        metadata index is made here: only Qdrant's filtered query would use it.
        """
        wanted = EXCLUSION_HEADROOM * limit
        hits = self._engine.query(vector, where, wanted)
        passing = []
        for hit in hits:
            record = fields.from_payload(hit.payload)
            if evaluate(node, record):
                passing.append(_scored(record, hit.score))
                if len(passing) == limit:
                    return passing
        return passing if len(hits) < wanted else None

    def _keyword_search(self, scope: Scope, query: KeywordQuery) -> builtins.list[ScoredRecord]:
        """BM25 ranked by Qdrant over the ``keywords`` sparse vectors (:mod:`memcore_qdrant.keywords`).

        The idf of each query term is counted in the reading scope (and filter): one count of
        the scope, one per term, each answered by a payload index.
        """
        wanted = sorted(set(terms(query.keywords)))
        if not wanted:
            return []
        with self._lock, translated("keyword search", self.location):
            where = self._where(scope, query.filter)
            documents = self._engine.count(where)
            weights = {}
            for term in wanted:
                having = Clause(
                    must=(*where.must, Match(fields.TERMS, term)),
                    should=where.should,
                    must_not=where.must_not,
                )
                seen = self._engine.count(having) if documents else 0
                if seen:
                    weights[term] = idf(documents, seen)
            if not weights:
                return []
            hits = self._engine.keyword_query(query_vector(weights), where, query.limit or documents)
            found = [(h.score, fields.from_payload(h.payload)) for h in hits if h.score > 0]
            # Equal scores, newest first (as the exact scan orders them); Qdrant leaves ties unordered.
            found.sort(key=lambda hit: (hit[0], order_key(hit[1])), reverse=True)
            return [ScoredRecord.of(record, score) for score, record in found]

    def _count(self, scope: Scope, node: Filter | None) -> int:
        with self._lock, translated("count records", self.location):
            return self._engine.count(self._where(scope, node))

    def _delete(self, scope: Scope, ids: builtins.list[UUID]) -> int:
        with self._lock, translated("delete records", self.location):
            return self._delete_matching(scoped(scope, with_ids(ids)))

    def _delete_where(self, scope: Scope, node: Filter | None) -> int:
        with self._lock, translated("delete records", self.location):
            return self._delete_matching(self._where(scope, node))

    def _delete_matching(self, where: Clause) -> int:
        found = self._engine.count(where)
        if found:
            self._engine.delete(where)
        return found

    def purge(self) -> None:
        """Physically erase deleted records: the embedded shard is rebuilt from its live points.

        On a server, Qdrant's optimizer vacuums deleted points on its own schedule.
        """
        super().purge()
        with self._lock, translated("purge", self.location):
            self._engine.purge()

    def _load_vector_space(self) -> VectorSpace | None:
        with self._lock:
            return self._engine.load_space()

    def _save_vector_space(self, space: VectorSpace) -> None:
        with self._lock, translated("save the vector space", self.location):
            if self._engine.dimension() not in (None, space.dimension):
                raise DimensionMismatchError(
                    f"the store holds {self._engine.dimension()}-dimensional vectors, not {space.dimension}"
                )
            self._engine.save_space(space)

    def _reconnect_in_child(self) -> None:
        """In a forked child: a server store gets a client of its own; an embedded one refuses.

        :raises StoreForkedError: for ``qdrant://`` and ``qdrant+memory://``, whose shard the
            parent owns (open the store again in the child once the parent closed it, or use a server).
        """
        if self._connection.reconnect is None:
            super()._reconnect_in_child()
            return
        with translated("reconnect in a forked process", self.location):
            self._connection.reconnect()
        self._lock = threading.RLock()  # a parent thread may have held the inherited one at the fork

    def _close(self) -> None:
        with translated("close", self.location):
            self._connection.release()


class QdrantMemoryStore(QdrantStore):
    """``qdrant+memory://``: a Qdrant Edge shard in a temporary folder, deleted on close."""

    schemes: ClassVar[tuple[str, ...]] = ("qdrant+memory",)
    capabilities: ClassVar[Capabilities] = Capabilities(durable=False, keyword_index=True)

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``qdrant+memory://`` (nothing may follow the scheme)."""
        url.require_empty_location()
        return cls(connect_memory())


DEFAULT_PORT = 6333


class QdrantServerStore(QdrantStore):
    """``qdrant+http(s)://host:port[?collection=name]``: a collection (default ``memcore``) on a server.

    The API key comes from ``$QDRANT_API_KEY``. Several processes may share the
    collection; the counts deletes return are then per call, not transactions
    across clients.
    """

    schemes: ClassVar[tuple[str, ...]] = ("qdrant+http", "qdrant+https")
    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=True, ann=True, server=True, keyword_index=True
    )

    url_params: ClassVar[frozenset[str]] = frozenset({COLLECTION})

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``qdrant+http(s)://host[:port]`` (port 6333 by default; ``?collection=``)."""
        host, port = url.server(DEFAULT_PORT, secret_hint=f"give the API key in ${API_KEY_ENV}")
        scheme = url.scheme.removeprefix("qdrant+")
        return cls(
            connect_server(f"{scheme}://{host}:{port}", url.text_param(COLLECTION, DEFAULT_COLLECTION))
        )
