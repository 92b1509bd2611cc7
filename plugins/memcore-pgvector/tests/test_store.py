"""What the conformance suite does not cover: the server going away, dimensions, injection, erasure."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psycopg
import pytest
from conftest import Postgres, running_postgres, with_table
from memcore_pgvector import PgvectorStore

from memcore.errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    InvalidInputError,
    InvalidRecordError,
    StoreCorruptedError,
    StoreUnavailableError,
)
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import VectorSpace

SCOPE = Scope(tenant="acme", user_id="alice")


def _records(count: int, scope: Scope = SCOPE, text: str = "note") -> list[MemoryRecord]:
    return [
        MemoryRecord(scope=scope, message=Message(role="user", content=f"{text} {i}"), metadata={"i": i})
        for i in range(count)
    ]


def _vectors(count: int, dim: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_a_server_that_goes_away_is_unavailable_and_the_pool_recovers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_postgres(data) as server:
        store = PgvectorStore.from_url(with_table(server.uri, "records"))
        store.add(_records(3))
    try:
        with pytest.raises(StoreUnavailableError):
            store.count(SCOPE)
        with pytest.raises(StoreUnavailableError):
            store.add(_records(1))
        with running_postgres(data):  # the same data folder and socket: the server is back
            assert _once_back(lambda: store.count(SCOPE)) == 3
            store.add(_records(2, text="after"))
            assert store.count(SCOPE) == 5
    finally:
        store.close()


def _once_back(call: Callable[[], int], seconds: float = 60.0) -> int:
    """What ``call`` returns once the pool has reconnected (it retries with backoff, as callers should)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except StoreUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_server_that_is_not_there_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError):
        PgvectorStore.from_url(f"postgresql://postgres@/postgres?host={tmp_path}&connect_timeout=2")


def test_a_table_made_with_another_dimension_refuses_others(postgres: Postgres, table_name: str) -> None:
    url = with_table(postgres.uri, table_name)
    with PgvectorStore.from_url(url) as store:
        store.add(_records(2), _vectors(2, 8))
    with PgvectorStore.from_url(url) as reopened:
        assert reopened.dimension == 8
        with pytest.raises(DimensionMismatchError):
            reopened.add(_records(1), _vectors(1, 4))
        assert reopened.count(SCOPE) == 2


def test_scoped_search_returns_limit_hits_through_the_hnsw_index(postgres: Postgres, table_name: str) -> None:
    """1 % of the table in scope: the iterative index scan keeps going until it has ``limit`` hits."""
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        count = 3_000
        scopes = [Scope(tenant="acme", user_id=f"u{i % 100}") for i in range(count)]
        records = [
            MemoryRecord(scope=scope, message=Message(role="user", content=f"r{i}"))
            for i, scope in enumerate(scopes)
        ]
        vectors = _vectors(count, 16)
        store.add(records, vectors)
        query = _vectors(1, 16, seed=1)[0]
        hits = store.search(Scope(tenant="acme", user_id="u7"), vector=query, limit=10)
        assert len(hits) == 10
        mine = [i for i, scope in enumerate(scopes) if scope.user_id == "u7"]
        exact = sorted(mine, key=lambda i: -float(vectors[i] @ query))[:10]
        found = {hit.record.message.content for hit in hits}
        assert len(found & {f"r{i}" for i in exact}) >= 9, "HNSW recall@10 within the scope"


def test_values_and_names_never_become_sql(postgres: Postgres, table_name: str) -> None:
    hostile = "x'); DROP TABLE " + table_name + "; --"
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        message = Message(role="user", content=hostile)
        store.add([MemoryRecord(scope=SCOPE, message=message, metadata={"k": hostile})])
        assert store.count(SCOPE, filter={"metadata.k": hostile}) == 1
        assert store.count(SCOPE, filter={"metadata.k": {"$in": [hostile, "' OR 1=1 --"]}}) == 1
        assert store.count(SCOPE, filter={"metadata.k": "' OR '1'='1"}) == 0
        assert len(store.search(SCOPE, text="drop table", limit=5)) == 1
    for bad in ("x; DROP TABLE y", "Records", '"quoted"', "a" * 49, "1st", "notes_meta"):
        with pytest.raises(InvalidInputError):
            PgvectorStore.from_url(with_table(postgres.uri, bad))


def test_purge_leaves_no_deleted_bytes_in_the_table_files(postgres: Postgres, table_name: str) -> None:
    needle = "needle-7f3a9c-the-secret-the-user-asked-us-to-forget"
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        kept = _records(50)
        secret = MemoryRecord(scope=SCOPE, message=Message(role="user", content=needle))
        store.add([*kept, secret], _vectors(51, 8))
        store.delete(SCOPE, [secret.id])
        store.purge()
        with psycopg.connect(postgres.uri, autocommit=True) as connection:
            connection.execute("CHECKPOINT")
        assert store.count(SCOPE) == 50
    table_files = subprocess.run(
        ["grep", "-rl", needle, str(postgres.data / "base")], capture_output=True, text=True, check=False
    )
    assert table_files.stdout == "", f"deleted content still on disk in {table_files.stdout}"


def test_messages_never_show_the_password() -> None:
    with pytest.raises(StoreUnavailableError) as raised:
        PgvectorStore.from_url("postgresql://me:hunter2@127.0.0.1:1/db?connect_timeout=2")
    assert "hunter2" not in str(raised.value)


def test_concurrent_first_opens_of_a_table_all_succeed(postgres: Postgres, table_name: str) -> None:
    """Eight threads creating the same table at once wait on the advisory lock instead of racing."""
    url = with_table(postgres.uri, table_name)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def open_and_write(number: int) -> None:
        barrier.wait()
        try:
            with PgvectorStore.from_url(url) as store:
                store.add(_records(1, text=f"thread {number}"))
        except BaseException as exc:  # collected, and failed on below
            errors.append(exc)

    threads = [threading.Thread(target=open_and_write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with PgvectorStore.from_url(url) as store:
        assert store.count(SCOPE) == 8


def test_a_table_of_a_newer_schema_is_refused(postgres: Postgres, table_name: str) -> None:
    url = with_table(postgres.uri, table_name)
    PgvectorStore.from_url(url).close()
    with psycopg.connect(postgres.uri, autocommit=True) as connection:
        connection.execute(f"UPDATE {table_name}_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreCorruptedError, match="upgrade memcore-pgvector"):
        PgvectorStore.from_url(url)


def test_numbers_beyond_2_53_compare_exactly(postgres: Postgres, table_name: str) -> None:
    """Floats are stored as their shortest text: beyond 2**53 that is not their exact value."""
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        big = MemoryRecord(
            scope=SCOPE, message=Message(role="user", content="big"), metadata={"n": float(2**60)}
        )
        near = MemoryRecord(
            scope=SCOPE, message=Message(role="user", content="near"), metadata={"n": 2**60 + 4}
        )
        store.add([big, near])
        assert [r.id for r in store.list(SCOPE, filter={"metadata.n": 2**60})] == [big.id]
        assert [r.id for r in store.list(SCOPE, filter={"metadata.n": {"$gt": 2.0**60}})] == [near.id]
        assert store.count(SCOPE, filter={"metadata.n": {"$gte": 2**60}}) == 2
        assert store.count(Scope(tenant="other"), filter={"metadata.n": 2**60}) == 0


def test_nul_characters_are_kept_in_content_and_refused_in_metadata(
    postgres: Postgres, table_name: str
) -> None:
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        record = MemoryRecord(scope=SCOPE, message=Message(role="user", content="before\x00after"))
        store.add([record])
        assert store.get(SCOPE, [record.id])[0].message.content == "before\x00after"
        assert len(store.search(SCOPE, text="after", limit=5)) == 1
        bad = MemoryRecord(scope=SCOPE, message=Message(role="user", content="x"), metadata={"k": "a\x00b"})
        with pytest.raises(InvalidRecordError):
            store.add([bad])
        assert store.count(SCOPE) == 1


def test_a_store_opened_before_the_first_vector_finds_it(postgres: Postgres, table_name: str) -> None:
    url = with_table(postgres.uri, table_name)
    with PgvectorStore.from_url(url) as reader, PgvectorStore.from_url(url) as writer:
        assert reader.dimension is None
        vectors = _vectors(3, 8)
        writer.add(_records(3), vectors)
        assert reader.dimension == 8
        assert len(reader.search(SCOPE, vector=vectors[0], limit=3)) == 3


def test_a_second_binding_of_another_embedder_is_refused(postgres: Postgres, table_name: str) -> None:
    url = with_table(postgres.uri, table_name)
    with PgvectorStore.from_url(url) as first, PgvectorStore.from_url(url) as second:
        first.bind_vector_space(VectorSpace("minilm", 384))
        with pytest.raises(EmbedderMismatchError):
            second._save_vector_space(VectorSpace("other", 384))  # past the in-process check: the race
        assert second.vector_space() == VectorSpace("minilm", 384)


def test_a_password_parameter_is_masked_too() -> None:
    with pytest.raises(StoreUnavailableError) as raised:
        PgvectorStore.from_url("postgresql://me@127.0.0.1:1/db?password=hunter2&connect_timeout=2")
    assert "hunter2" not in str(raised.value)
