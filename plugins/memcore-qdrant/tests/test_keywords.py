"""Keyword search done by Qdrant: sparse BM25 vectors, idf of the reading scope, stores made before it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as edge
from memcore_qdrant import QdrantStore, edge_engine
from memcore_qdrant import payload as fields
from memcore_qdrant.client_engine import KEYWORDS_KEY, STORAGE_IDS_KEY
from memcore_qdrant.connections import DEFAULT_COLLECTION
from memcore_qdrant.engine import VECTOR_NAME
from memcore_qdrant.keywords import AVERAGE_TERMS
from qdrant_client import QdrantClient, models

from memcore.keywords import idf, term_counts, term_score
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope

TEXTS = [
    "Caroline researched adoption agencies last week",
    "Melanie signed up for a pottery class",
    "The pottery workshop was relaxing; pottery is therapy",
    "We adopted a puppy, adoption papers are signed",
    "Nothing in common here",
]
SCOPE = Scope(tenant="acme", user_id="u")


def _records() -> list[MemoryRecord]:
    return [MemoryRecord(scope=SCOPE, message=Message(role="user", content=text)) for text in TEXTS]


def _unit_vectors(count: int) -> np.ndarray:
    vectors = np.random.default_rng(0).normal(size=(count, 8)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_scores_are_bm25_with_the_scope_idf_and_a_fixed_average_length(tmp_path: Path) -> None:
    with QdrantStore.from_url(f"qdrant://{tmp_path / 'store'}") as store:
        records = _records()
        store.add(records)
        other = Scope(tenant="other")  # its words must not change this scope's idf
        theirs = Message(role="user", content="adoption")
        store.add([MemoryRecord(scope=other, message=theirs) for _ in range(9)])
        hits = store.search(SCOPE, keywords="adoption pottery", limit=10)
    scope_idf = {term: idf(len(TEXTS), 2) for term in ("adopt", "potteri")}  # each in 2 of the 5 texts
    expected = {}
    for record, text in zip(records, TEXTS, strict=True):
        counts, length = term_counts(text)
        shared = [(weight, counts[term]) for term, weight in scope_idf.items() if term in counts]
        score = sum(term_score(weight, tf, length, AVERAGE_TERMS) for weight, tf in shared)
        if score:
            expected[record.id] = score
    newest_first = list(reversed(expected))  # written in one batch, in order: equal scores go newest first
    assert [h.record.id for h in hits] == sorted(newest_first, key=lambda i: -round(expected[i], 5))
    assert [h.score for h in hits] == pytest.approx([expected[h.record.id] for h in hits], rel=1e-5)


def test_a_shard_made_before_keywords_is_rebuilt_with_them(tmp_path: Path) -> None:
    """An Edge shard of the earlier format: a placeholder sparse vector, no terms in the payloads."""
    root = tmp_path / "store"
    config = edge.EdgeConfig(sparse_vectors={edge_engine.PLACEHOLDER: edge.EdgeSparseVectorParams()})
    shard = edge.EdgeShard.create(str(root / "shard"), config)
    edge_engine.ensure_indexes(shard)
    shard.update(edge.UpdateOperation.create_dense_vector(VECTOR_NAME, 8, edge.Distance.Cosine))
    vectors = _unit_vectors(len(TEXTS))
    old = []
    for record, vector in zip(_records(), vectors, strict=True):
        payload = fields.to_payload(record)
        del payload[fields.TERMS], payload[fields.RECORD_ID]  # neither existed then
        old.append(edge.Point(record.id, {VECTOR_NAME: vector.tolist()}, payload))
    shard.update(edge.UpdateOperation.upsert_points(old))
    shard.close()
    with QdrantStore.from_url(f"qdrant://{root}") as store:
        assert [h.record.message.content for h in store.search(SCOPE, keywords="pottery", limit=5)] == [
            TEXTS[2],
            TEXTS[1],
        ]
        assert store.search(SCOPE, vector=vectors[0], limit=1)[0].record.message.content == TEXTS[0]


def test_a_collection_made_before_keywords_gets_them_on_open(tmp_path: Path) -> None:
    """The server path (over local mode): the sparse vector is added and every point re-written."""
    root = tmp_path / "local"
    client = QdrantClient(path=str(root / "client"))
    client.create_collection(DEFAULT_COLLECTION, vectors_config={})
    structs = []
    for record in _records():
        payload = fields.to_payload(record)
        del payload[fields.TERMS], payload[fields.RECORD_ID]  # neither existed then
        structs.append(models.PointStruct(id=str(record.id), vector={}, payload=payload))
    client.upsert(DEFAULT_COLLECTION, points=structs)
    client.close()
    with QdrantStore.open_local_client(root) as store:
        hits = store.search(SCOPE, keywords="adoption", limit=5)
        assert [h.record.message.content for h in hits] == [TEXTS[3], TEXTS[0]]
    client = QdrantClient(path=str(root / "client"))
    try:
        assert client.get_collection(DEFAULT_COLLECTION).config.metadata == {
            KEYWORDS_KEY: True,
            STORAGE_IDS_KEY: True,
        }
    finally:
        client.close()
