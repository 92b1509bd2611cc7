"""The raw Qdrant Edge baseline of ``memcore bench``'s adapter overhead (see :mod:`memcore.bench.raw`).

A qdrant-edge-py shard with a cosine ``dense`` vector, the ``keywords`` sparse
vector and the store's payload indexes (every write maintains them, on both
sides), written with the same payloads and keyword vectors the store writes
(made before the clock starts; turning them into
``edge.Point`` objects is the client's work, and timed), searched exactly with
the same single-condition scope filter, its JSON records parsed on read; points are
keyed by storage id and read or deleted by the ``record_id`` payload field, as the
store does. What remains between the two sides is memcore's own work: validation,
building payloads, decoding into models, the count a delete reports.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import qdrant_edge as edge

from memcore.records import MemoryRecord
from memcore.scope import Scope, storage_id
from memcore.validation import Matrix
from memcore_qdrant import payload as fields
from memcore_qdrant.edge_engine import ensure_indexes
from memcore_qdrant.engine import VECTOR_NAME
from memcore_qdrant.keywords import KEYWORD_VECTOR


def _scoped(scope: Scope, *extra: Any) -> edge.Filter:
    match = edge.MatchValue(fields.scope_key(scope.items()))
    return edge.Filter(must=[edge.FieldCondition(key=fields.SCOPE_KEYS, match=match), *extra])


def _with_ids(ids: Sequence[UUID]) -> edge.FieldCondition:
    return edge.FieldCondition(key=fields.RECORD_ID, match=edge.MatchAny([str(i) for i in ids]))


def _parsed(points: Sequence[Any]) -> list[Any]:
    return [json.loads(point.payload[fields.RECORD]) for point in points]


class RawQdrantEdge:
    """A Qdrant Edge shard in ``path``, created on the first batch (which gives the dimension)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._shard: edge.EdgeShard | None = None

    def _created(self, dimension: int) -> edge.EdgeShard:
        if self._shard is None:
            self._path.mkdir(parents=True, exist_ok=True)
            config = edge.EdgeConfig(
                vectors={VECTOR_NAME: edge.EdgeVectorParams(dimension, edge.Distance.Cosine)},
                sparse_vectors={KEYWORD_VECTOR: edge.EdgeSparseVectorParams()},
            )
            self._shard = edge.EdgeShard.create(str(self._path), config)
            ensure_indexes(self._shard)
        return self._shard

    @property
    def _open(self) -> edge.EdgeShard:
        if self._shard is None:
            raise RuntimeError("write a batch before reading")
        return self._shard

    def prepare(self, records: Sequence[MemoryRecord], vectors: Matrix) -> list[tuple[Any, ...]]:
        """The point ids, vectors, payloads and keyword vectors the store would write (the shard is made
        on the first call)."""
        self._created(vectors.shape[1])
        prepared = []
        for record, vector in zip(records, vectors, strict=True):
            payload = fields.to_payload(record)
            point_id = storage_id(record.scope, record.id)
            prepared.append((point_id, vector, payload, fields.keyword_vector(payload)))
        return prepared

    def add(self, prepared: list[tuple[Any, ...]]) -> None:
        """Build the points and upsert them."""
        points = [
            edge.Point(i, {VECTOR_NAME: vector.tolist(), KEYWORD_VECTOR: edge.SparseVector(*words)}, payload)
            for i, vector, payload, words in prepared
        ]
        self._open.update(edge.UpdateOperation.upsert_points(points))

    def search(self, scope: Scope, vector: Matrix, limit: int) -> list[Any]:
        """An exact scoped vector query, its records parsed."""
        request = edge.QueryRequest(
            limit=limit,
            query=edge.Query.Nearest(vector.tolist(), using=VECTOR_NAME),
            filter=_scoped(scope),
            with_payload=[fields.RECORD],
            params=edge.SearchParams(exact=True),
        )
        return _parsed(self._open.query(request))

    def get(self, scope: Scope, ids: Sequence[UUID]) -> list[Any]:
        """A scoped read by id, its records parsed."""
        request = edge.ScrollRequest(
            limit=len(ids), filter=_scoped(scope, _with_ids(ids)), with_payload=[fields.RECORD]
        )
        points, _ = self._open.scroll(request)
        return _parsed(points)

    def delete(self, scope: Scope, ids: Sequence[UUID]) -> None:
        """A scoped delete by id."""
        where = _scoped(scope, _with_ids(ids))
        self._open.update(edge.UpdateOperation.delete_points_by_filter(where))

    def close(self) -> None:
        """Close the shard."""
        if self._shard is not None:
            self._shard.close()
