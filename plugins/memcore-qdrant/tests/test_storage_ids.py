"""Point ids are storage ids (scope + record id), and stores whose point ids were record ids move to them.

The first layout gave each point its record's id and had no ``record_id`` payload field; opening
such a store rewrites it (Qdrant Edge: rebuilt as by ``purge()``; the server path: point by point,
new point first). Both embedded engines are covered: Qdrant Edge and, for the server path's
:class:`~memcore_qdrant.client_engine.ClientEngine`, qdrant-client's local mode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np
import pytest
import qdrant_edge as edge
from memcore_qdrant import QdrantStore, edge_engine, meta
from memcore_qdrant import payload as fields
from memcore_qdrant.client_engine import KEYWORDS_KEY, STORAGE_IDS_KEY
from memcore_qdrant.connections import DEFAULT_COLLECTION
from memcore_qdrant.engine import VECTOR_NAME, Point
from memcore_qdrant.filters import Clause
from memcore_qdrant.keywords import KEYWORD_VECTOR
from qdrant_client import QdrantClient, models

from memcore.records import MemoryRecord, Message
from memcore.scope import Scope, storage_id
from memcore.store import VectorSpace

MINE, THEIRS = Scope(tenant="acme", user_id="alice"), Scope(tenant="acme", user_id="bob")
DIM = 8

Stored = tuple[UUID, dict[str, Any], list[float]]
"""A point as the first layout wrote it: its id, its payload, its vector."""


def _record(scope: Scope, content: str, record_id: UUID | None = None) -> MemoryRecord:
    record = MemoryRecord(scope=scope, message=Message(role="user", content=content))
    return record if record_id is None else record.model_copy(update={"id": record_id})


def _legacy(record: MemoryRecord, vector: np.ndarray, point_id: UUID | None = None) -> Stored:
    """The point the first layout wrote: at the record's id, without ``record_id``."""
    payload = fields.to_payload(record)
    del payload[fields.RECORD_ID]
    return point_id or record.id, payload, vector.tolist()


def _current(record: MemoryRecord, vector: np.ndarray) -> Stored:
    return storage_id(record.scope, record.id), fields.to_payload(record), vector.tolist()


def _unit(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


def _write_edge(root: Path, points: Sequence[Stored]) -> None:
    """A Qdrant Edge shard of the first layout, and its ``memcore.json`` of schema version 1."""
    config = edge.EdgeConfig(sparse_vectors={KEYWORD_VECTOR: edge.EdgeSparseVectorParams()})
    shard = edge.EdgeShard.create(str(root / edge_engine.SHARD), config)
    edge_engine.ensure_indexes(shard)
    shard.update(edge.UpdateOperation.create_dense_vector(VECTOR_NAME, DIM, edge.Distance.Cosine))
    shard.update(
        edge.UpdateOperation.upsert_points(
            [
                edge.Point(
                    point_id,
                    {VECTOR_NAME: vector, KEYWORD_VECTOR: edge.SparseVector(*fields.keyword_vector(payload))},
                    payload,
                )
                for point_id, payload, vector in points
            ]
        )
    )
    shard.close()
    space = {"embedder": "test", "dimension": DIM}
    body = {"format": meta.FORMAT, "schema_version": 1, "vector_space": space}
    (root / meta.FILE_NAME).write_text(json.dumps(body))


def _write_local(root: Path, points: Sequence[Stored]) -> None:
    """A collection of the first layout in qdrant-client's local mode (keyword search already there)."""
    client = QdrantClient(path=str(root / "client"))
    client.create_collection(
        DEFAULT_COLLECTION,
        vectors_config={VECTOR_NAME: models.VectorParams(size=DIM, distance=models.Distance.COSINE)},
        sparse_vectors_config={KEYWORD_VECTOR: models.SparseVectorParams()},
        metadata={KEYWORDS_KEY: True},
    )
    structs = []
    for point_id, payload, vector in points:
        indices, values = fields.keyword_vector(payload)
        sparse = models.SparseVector(indices=indices, values=values)
        structs.append(
            models.PointStruct(
                id=str(point_id), vector={VECTOR_NAME: vector, KEYWORD_VECTOR: sparse}, payload=payload
            )
        )
    client.upsert(DEFAULT_COLLECTION, points=structs)
    client.close()


Layout = tuple[Callable[[Path, Sequence[Stored]], None], Callable[[Path], QdrantStore]]

LAYOUTS: dict[str, Layout] = {
    "edge": (_write_edge, lambda root: QdrantStore.from_url(f"qdrant://{root}")),
    "local": (_write_local, QdrantStore.open_local_client),
}


def _points(store: QdrantStore) -> list[Point]:
    return store._engine.scroll(Clause(), whole_payload=True)


def _assert_current(store: QdrantStore) -> None:
    """Every point sits at its record's storage id and names its record id in its payload."""
    for point in _points(store):
        record = fields.from_payload(point.payload)
        assert point.id == storage_id(record.scope, record.id)
        assert point.payload[fields.RECORD_ID] == str(record.id)


@pytest.fixture(params=sorted(LAYOUTS))
def layout(request: pytest.FixtureRequest) -> Layout:
    return LAYOUTS[request.param]


def test_a_store_of_record_id_points_is_moved_to_storage_ids(tmp_path: Path, layout: Layout) -> None:
    write, open_store = layout
    records = [_record(MINE, text) for text in ("pottery class", "adoption papers", "a puppy")]
    vectors = [_unit(seed) for seed in range(len(records))]
    write(tmp_path, [_legacy(r, v) for r, v in zip(records, vectors, strict=True)])
    with open_store(tmp_path) as store:
        _assert_current(store)
        assert {p.id for p in _points(store)}.isdisjoint(r.id for r in records)  # the old points are gone
        assert store.get(MINE, [r.id for r in records]) == records
        assert store.list(MINE) == sorted(records, key=lambda r: r.created_at)
        assert store.search(MINE, vector=vectors[1], limit=1)[0].record == records[1]
        assert [h.record for h in store.search(MINE, keywords="pottery")] == [records[0]]
        read = store.vectors(MINE, [r.id for r in records])
        assert all(np.allclose(read[r.id], v, atol=1e-6) for r, v in zip(records, vectors, strict=True))
        assert store.vector_space() == (VectorSpace("test", DIM) if write is _write_edge else None)
        assert store.delete(MINE, [records[0].id]) == 1
        assert store.get(MINE, [records[0].id]) == [] and store.count(MINE) == 2
    with open_store(tmp_path) as store:
        assert store.get(MINE, [r.id for r in records]) == records[1:]
        _assert_current(store)
    if write is _write_edge:
        assert meta.read_version(tmp_path) == meta.SCHEMA_VERSION
    else:
        client = QdrantClient(path=str(tmp_path / "client"))
        try:
            assert client.get_collection(DEFAULT_COLLECTION).config.metadata[STORAGE_IDS_KEY] is True
        finally:
            client.close()


def test_an_old_point_whose_id_is_another_records_storage_id_is_moved_first(
    tmp_path: Path, layout: Layout
) -> None:
    """A record id chosen equal to another scope's storage id: neither record is lost in the move."""
    write, open_store = layout
    # Scanned first (points come in id order), so that its move has to wait for theirs.
    candidates = (_record(MINE, "mine") for _ in range(100))
    mine = next(r for r in candidates if str(r.id) < str(storage_id(MINE, r.id)))
    theirs = _record(THEIRS, "theirs", record_id=storage_id(MINE, mine.id))
    write(tmp_path, [_legacy(mine, _unit(1)), _legacy(theirs, _unit(2))])
    with open_store(tmp_path) as store:
        assert store.get(MINE, [mine.id]) == [mine]
        assert store.get(THEIRS, [theirs.id]) == [theirs]
        assert store.count(Scope(tenant="acme")) == 2
        _assert_current(store)


def test_a_move_cut_short_is_finished_without_undoing_later_writes(tmp_path: Path) -> None:
    """The server path moves point by point: a crash can leave an old point beside its new one,
    which may since hold a newer version of the record; the next open keeps the new point."""
    moved, updated = _record(MINE, "moved"), _record(MINE, "before")
    newer = updated.model_copy(update={"message": Message(role="user", content="after")})
    _write_local(
        tmp_path / "local",
        [
            _legacy(moved, _unit(1)),
            _current(moved, _unit(1)),
            _legacy(updated, _unit(2)),
            _current(newer, _unit(3)),
        ],
    )
    with QdrantStore.open_local_client(tmp_path / "local") as store:
        assert store.get(MINE, [moved.id, updated.id]) == [moved, newer]
        assert len(_points(store)) == 2
        _assert_current(store)


def test_the_same_id_in_two_scopes_is_two_points(tmp_path: Path) -> None:
    mine = _record(MINE, "mine")
    theirs = mine.model_copy(update={"scope": THEIRS, "message": Message(role="user", content="theirs")})
    with QdrantStore.from_url(f"qdrant://{tmp_path / 'store'}") as store:
        store.add([mine])
        store.add([theirs])
        _assert_current(store)
        assert len(_points(store)) == 2
        assert store.get(Scope(tenant="acme"), [mine.id]) == [mine, theirs]
        assert store.delete(THEIRS, [mine.id]) == 1
        assert [p.id for p in _points(store)] == [storage_id(MINE, mine.id)]
