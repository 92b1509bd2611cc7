"""What the plugin adds to the embedded engine: purge, locking, shared engines, incompatible shards."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as edge
from memcore_qdrant import IncompatibleCollectionError, QdrantStore
from memcore_qdrant.meta import write_space
from qdrant_client import QdrantClient, models

from memcore.errors import StoreLockedError
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import VectorSpace

DIM = 8


def _record(scope: Scope, content: str) -> MemoryRecord:
    return MemoryRecord(scope=scope, message=Message(role="user", content=content))


def _bytes_under(folder: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file())


def test_purge_erases_deleted_content_and_vectors_from_disk(tmp_path: Path) -> None:
    root = tmp_path / "store"
    scope = Scope(tenant="acme", user_id="alice")
    secret = f"SECRET-{uuid.uuid4().hex}"
    kept = f"KEPT-{uuid.uuid4().hex}"
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((2, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    doomed, survivor = _record(scope, secret), _record(scope, kept)
    with QdrantStore.from_url(f"qdrant://{root}") as store:
        store.add([doomed, survivor], vectors)
        store.delete(scope, [doomed.id])
        on_disk = _bytes_under(root)
        assert secret.encode() in on_disk  # deleted, but still in the engine's files
        assert vectors[0].tobytes() in on_disk
        store.purge()
        on_disk = _bytes_under(root)
        assert secret.encode() not in on_disk
        assert secret.casefold().encode() not in on_disk
        assert vectors[0].tobytes() not in on_disk
        assert kept.encode() in on_disk
        assert [h.record.id for h in store.search(scope, vector=vectors[1], limit=5)] == [survivor.id]
    with QdrantStore.from_url(f"qdrant://{root}") as reopened:
        assert reopened.get(scope, [doomed.id, survivor.id]) == [survivor]
        assert reopened.dimension == DIM


def test_a_second_process_gets_store_locked_error(tmp_path: Path) -> None:
    root = tmp_path / "store"
    probe = (
        "import sys\n"
        "from memcore.errors import StoreLockedError\n"
        "from memcore_qdrant import QdrantStore\n"
        "try:\n"
        f"    QdrantStore.from_url({f'qdrant://{root}'!r})\n"
        "except StoreLockedError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    with QdrantStore.from_url(f"qdrant://{root}"):
        held = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert held.returncode == 3, held.stderr
    assert "open in another process" in held.stdout
    released = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert released.returncode == 0, released.stdout + released.stderr


def test_store_objects_of_one_process_share_the_engine(tmp_path: Path) -> None:
    url = f"qdrant://{tmp_path / 'store'}"
    scope = Scope(tenant="acme")
    record = _record(scope, "shared")
    first, second = QdrantStore.from_url(url), QdrantStore.from_url(url)
    try:
        first.add([record])
        assert second.get(scope, [record.id]) == [record]
        first.close()
        assert second.count(scope) == 1
    finally:
        second.close()
    local = QdrantStore.open_local_client(tmp_path / "other")
    try:
        with pytest.raises(StoreLockedError, match="qdrant-client-local"):
            QdrantStore.from_url(f"qdrant://{tmp_path / 'other'}")
    finally:
        local.close()


def test_a_shard_with_another_distance_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    config = edge.EdgeConfig(
        vectors={"dense": edge.EdgeVectorParams(size=DIM, distance=edge.Distance.Euclid)}
    )
    edge.EdgeShard.create(str(root / "shard"), config).close()
    with pytest.raises(IncompatibleCollectionError, match="cosine"):
        QdrantStore.from_url(f"qdrant://{root}")
    QdrantStore.from_url(f"qdrant://{root}-elsewhere").close()  # the failed open left no lock behind


def test_a_shard_of_another_dimension_than_its_binding_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with QdrantStore.from_url(f"qdrant://{root}") as store:
        store.add([_record(Scope(tenant="acme"), "x")], np.ones((1, DIM), dtype=np.float32))
    write_space(root, VectorSpace("other-model", DIM * 2))
    with pytest.raises(IncompatibleCollectionError, match="dimensions"):
        QdrantStore.from_url(f"qdrant://{root}")


def test_a_collection_with_another_distance_is_refused_by_the_client_engine(tmp_path: Path) -> None:
    client = QdrantClient(path=str(tmp_path / "local" / "client"))
    vectors = {"dense": models.VectorParams(size=DIM, distance=models.Distance.EUCLID)}
    client.create_collection("memcore", vectors_config=vectors)
    client.close()
    with pytest.raises(IncompatibleCollectionError, match="cosine"):
        QdrantStore.open_local_client(tmp_path / "local")
