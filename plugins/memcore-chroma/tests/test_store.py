"""What the Chroma stores promise beyond the conformance suite."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from memcore_chroma import ChromaMemoryStore, ChromaStore, connection
from memcore_chroma.urls import ServerAddress, dimension_param, embedded_path, server_address

from memcore import open_store
from memcore.errors import (
    DimensionMismatchError,
    InvalidInputError,
    StoreLockedError,
)
from memcore.locking import lock_path
from memcore.plugin_manager import reset_plugin_manager
from memcore.scope import Scope
from memcore.store import VectorSpace
from memcore.testing.helpers import make_record, random_vectors


def test_urls_open_the_right_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCORE_LOAD_PLUGINS", "chroma")
    reset_plugin_manager()
    try:
        with open_store(f"chroma://{tmp_path}/db?collection=notes&dimension=4") as store:
            assert isinstance(store, ChromaStore)
            assert store.dimension == 4
        with open_store("chroma+memory://") as memory:
            assert isinstance(memory, ChromaMemoryStore)
    finally:
        reset_plugin_manager()


def test_url_parsing() -> None:
    location, parsed = embedded_path("chroma:///var/db?collection=c1")
    assert (location, dict(parsed.params)) == ("/var/db", {"collection": "c1"})
    assert embedded_path("chroma://rel/db")[0] == "rel/db"
    address, parsed = server_address("chroma+https://db.example:9000/?tenant=t&database=d&collection=abc")
    assert address == ServerAddress("db.example", 9000, ssl=True, tenant="t", database="d")
    assert parsed.params["collection"] == "abc"
    assert server_address("chroma+http://localhost")[0].port == 8000
    for bad in ("chroma://", "chroma:///db?colection=x", "chroma:///db?collection=a&collection=b"):
        with pytest.raises(InvalidInputError):
            embedded_path(bad)
    for bad in (
        "chroma+http://",
        "chroma+http://h:port",
        "chroma+http://h:1/path",
        "chroma+http://[::1:8000",
    ):
        with pytest.raises(InvalidInputError):
            server_address(bad)
    with pytest.raises(InvalidInputError):
        ChromaMemoryStore.from_url("chroma+memory://somewhere")
    for dimension in ("0", "-3", "x", "²", "9" * 5000):  # "²" is a digit to str.isdigit; int() refuses it
        with pytest.raises(InvalidInputError, match="dimension"):
            dimension_param(embedded_path(f"chroma:///db?dimension={dimension}")[1])


def test_invalid_collection_names_are_refused(tmp_path: Path) -> None:
    for name in ("ab", "-abc", "abc-", "a b c", "ümlaut"):
        with pytest.raises(InvalidInputError):
            ChromaStore(tmp_path, collection=name)


def test_real_reopen_restores_records_dimension_and_binding(tmp_path: Path) -> None:
    scope = Scope(tenant="t")
    records = [make_record(scope, f"r{i}", minute=i) for i in range(5)]
    with ChromaStore(tmp_path / "db") as store:  # the only client of this folder: closing stops it
        store.add(records, random_vectors(5))
        store.bind_vector_space(VectorSpace("hash", 8))
    with ChromaStore(tmp_path / "db") as store:
        assert store.list(scope) == records
        assert store.vector_space() == VectorSpace("hash", 8)
        with pytest.raises(DimensionMismatchError):
            store.add([make_record(scope)], random_vectors(1, dim=3))


def test_an_existing_collection_of_another_dimension_is_refused(tmp_path: Path) -> None:
    with ChromaStore(tmp_path, collection="notes") as store:
        store.add([make_record(Scope(tenant="t"))], random_vectors(1, dim=8))
    with pytest.raises(DimensionMismatchError):
        ChromaStore(tmp_path, collection="notes", dimension=16)
    ChromaStore(tmp_path, collection="notes", dimension=8).close()


def test_foreign_collections_are_refused(tmp_path: Path) -> None:
    chroma = connection.persistent(tmp_path)
    try:
        foreign = chroma.client.create_collection("theirs", embedding_function=None)
        foreign.add(ids=["x"], embeddings=[[1.0, 0.0]], documents=["not memcore"])
        chroma.client.create_collection(
            "euclid", configuration={"hnsw": {"space": "l2"}}, embedding_function=None
        )
        with pytest.raises(InvalidInputError, match="did not write"):
            ChromaStore(tmp_path, collection="theirs")
        with pytest.raises(InvalidInputError, match="cosine"):
            ChromaStore(tmp_path, collection="euclid")
    finally:
        chroma.release()


def test_integers_beyond_float_precision_round_trip_and_filter_exactly(tmp_path: Path) -> None:
    scope = Scope(tenant="t")
    big = 2**53 + 1
    values = [big, big - 1, 2**63 - 1, -(2**63), 2**53, 1e300]
    records = [make_record(scope, str(v), metadata={"n": v}) for v in values]
    with ChromaStore(tmp_path) as store:
        store.add(records)
        assert [r.metadata["n"] for r in store.list(scope)] == values
        assert [r.metadata["n"] for r in store.list(scope, filter={"metadata.n": big})] == [big]
        assert store.count(scope, filter={"metadata.n": {"$ne": big}}) == 5
        assert store.count(scope, filter={"metadata.n": {"$gt": 2**53}}) == 3
        assert store.count(scope, filter={"metadata.n": {"$nin": [2**63 - 1, 1e300]}}) == 4
        assert store.count(scope, filter={"metadata.n": {"$lt": 1e300}}) == 5


def test_memory_stores_are_isolated_from_each_other() -> None:
    scope = Scope(tenant="t")
    with ChromaMemoryStore() as first, ChromaMemoryStore() as second:
        first.add([make_record(scope)])
        assert second.count(scope) == 0


def test_a_second_process_is_locked_out(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        from memcore.errors import StoreLockedError
        from memcore_chroma import ChromaStore
        try:
            ChromaStore({str(tmp_path)!r})
        except StoreLockedError as exc:
            print("locked:", exc)
        """
    )
    with ChromaStore(tmp_path):
        other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert other.stdout.startswith("locked:"), other.stderr
    with ChromaStore(tmp_path) as again:  # released on close
        assert again.count(Scope(tenant="t")) == 0


def test_stores_in_one_process_share_the_client(tmp_path: Path) -> None:
    with ChromaStore(tmp_path, collection="one") as one, ChromaStore(tmp_path, collection="two") as two:
        one.add([make_record(Scope(tenant="t"))])
        assert two.count(Scope(tenant="t")) == 0
        with pytest.raises(StoreLockedError):
            lock_path(tmp_path.resolve() / connection.LOCK_FILE, what="a second lock", advice="-")


def _deleted_bytes_left(root: Path, secrets: list[str], vectors: np.ndarray) -> tuple[int, int]:
    """How many deleted texts, and deleted vectors (exact float32 bytes or close floats), are on disk."""
    data = b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())
    texts = sum(1 for s in secrets if s.encode() in data)
    floats = np.nan_to_num(np.frombuffer(data[: len(data) // 4 * 4], dtype=np.float32))
    found = 0
    for vector in vectors:
        exact = vector.tobytes() in data
        close = any(
            np.allclose(floats[i : i + len(vector)], vector, atol=1e-6)
            for i in np.flatnonzero(np.abs(floats - vector[0]) < 1e-6)
        )
        found += exact or close
    return texts, found


def test_purge_erases_deleted_records_from_the_files(tmp_path: Path) -> None:
    root = tmp_path / "db"
    scope = Scope(tenant="t")
    # more than Chroma's sync threshold (1,000), so that its HNSW files are written
    kept = [make_record(scope, f"kept {i}") for i in range(1_100)]
    doomed = [make_record(scope, f"secret-{i:03d}-zq") for i in range(100)]
    vectors = random_vectors(1_200, seed=5)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    with ChromaStore(root) as store:
        store.add(kept + doomed, vectors)
        store.delete(scope, [r.id for r in doomed])
        secrets = [r.message.content for r in doomed]
        before = _deleted_bytes_left(root, secrets, unit[1_100:])
        assert before[0] > 0 and before[1] > 0, "the test must see Chroma keep deleted data"
        store.purge()
        assert _deleted_bytes_left(root, secrets, unit[1_100:]) == (0, 0)
        assert store.count(scope) == 1_100
        hits = store.search(scope, vector=vectors[7], limit=1)
        assert hits[0].record.id == kept[7].id
    with ChromaStore(root) as reopened:
        assert reopened.count(scope) == 1_100


def test_records_without_vectors_get_stand_ins_of_the_right_size(tmp_path: Path) -> None:
    scope = Scope(tenant="t")
    plain = [make_record(scope, "plain") for _ in range(3)]
    with ChromaStore(tmp_path) as store:
        store.add(plain)
        store.add([make_record(scope, "vector")], random_vectors(1, dim=5))
        store.add([make_record(scope, "plain again")])
        assert store.count(scope) == 5
        assert [h.record.message.content for h in store.search(scope, vector=[1.0] * 5)] == ["vector"]
